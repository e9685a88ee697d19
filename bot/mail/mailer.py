"""Mail stage, batch building: claimed digests into ready-to-send messages (the
``Mailer``), spliced from one template per body where the bytes come out the same.

Reads the store (digest contents) and renders; never sends and never records an outcome.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import cast

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import TagRulesError, load_rules
from bot.config import Settings
from bot.domain import DeliverReport, DigestContent, DigestKind, DigestState, Subscriber, SubscriberStatus
from bot.mail.chunks import ChunkPool
from bot.mail.dkim import signer_of
from bot.mail.holes import Personal, footer_allows_substitution, templates_allow_splicing
from bot.mail.message import (
    Headers,
    Prepared,
    build_message,
    envelope_address,
    envelope_for,
    message_bytes,
    prepared,
)
from bot.mail.render import Keywords, Links, Renderer, period_words, web_links
from bot.mail.splice import MessageTemplate
from bot.mail.verp import return_path
from bot.store.contents import ContentCache, digest_content, digest_contents
from bot.store.digests import DigestRow, Finished, finish_many, get_digest, get_digests
from bot.store.engine import transaction
from bot.store.ledger import release_entries
from bot.store.subscribers import subscriber_statuses
from bot.tokens import make_token, signing_key
from bot.unsubscribes import journal_of

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class Built:
    """One digest's message, or why there is none."""

    row: DigestRow
    data: bytes | Prepared = b""
    sender: str = ""
    recipient: str = ""
    error: str | None = None


_UNSEEN = object()


class Mailer:
    """Everything needed to turn a digest id into bytes on the wire.

    Two ways to the same bytes: ``message_bytes`` renders and builds one message
    from scratch (the simple path: previews, resends, and any body the splice
    cannot reproduce); ``build`` makes a batch, each distinct body rendered once
    into a ``MessageTemplate`` and filled per subscriber (``bot.mail.splice``)."""

    TEMPLATES = 512  # distinct bodies kept; a day has about one per filter and window ...
    TEMPLATE_BYTES = 48 << 20  # ... and no more distinct bytes than this (bodies share most of theirs)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.renderer = Renderer(
            settings.paths.templates_dir,
            search_url=settings.digest.search_url,
            remote_images=settings.digest.remote_images,
            summary_chars=settings.digest.summary_chars,
            keywords=rule_keywords(settings.paths.tags_file),
            public_url=settings.web.public_url,
            top_picks=settings.digest.top_picks,
        )
        self.key = signing_key(settings)
        self.signer = signer_of(settings.dkim)
        self.envelope_sender = envelope_address(settings.sender.from_address)
        self.templates: OrderedDict[tuple[object, ...], MessageTemplate | None] = OrderedDict()
        self.splicing = templates_allow_splicing(self.renderer)
        self.footer_substituted = footer_allows_substitution(self.renderer)
        self.chunks = ChunkPool()  # the templates' constant bytes
        self.spliced = 0  # messages made from a template (for tests and benchmarks)
        self._builders: ProcessPoolExecutor | None = None
        self.new_run()

    def new_run(self, run: str | None = None) -> None:
        """Forget the entries read for earlier batches (``ContentCache``): one delivery
        run (*run*, or a new one) reuses them from batch to batch, the next one reads them again."""
        self.contents = ContentCache()
        self.run = run or uuid.uuid4().hex

    def return_path(self, digest_id: int) -> str:
        """The envelope sender: the VERP address of the digest with ``sender.bounce_address``."""
        bounces = self.settings.sender.bounce_address
        return envelope_address(return_path(self.key, bounces, digest_id)) if bounces else self.envelope_sender

    def links(self, subscriber: Subscriber) -> tuple[Links, tuple[str, ...]]:
        return self.links_for_token(make_token(self.key, subscriber.id, subscriber.unsubscribe_secret))

    async def prepare(
        self, factory: sessionmaker[Session], ids: list[int], *, now: datetime, worker: str
    ) -> tuple[list[Built], DeliverReport]:
        """``_prepare_batch`` in a thread of this process, or with
        ``digest.build_processes`` in a worker process (its own connection and
        templates), so that building the next batch overlaps sending this one on
        another core."""
        processes = self.settings.digest.build_processes
        if not processes:
            # In a thread: rendering a batch is CPU work the event loop (sends, signals) must not wait for.
            report = DeliverReport()
            built = await asyncio.to_thread(_prepare_batch, factory, self, ids, now=now, worker=worker, report=report)
            return built, report
        if self._builders is None:
            self._builders = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
        url = factory.kw["bind"].url.render_as_string(hide_password=False)
        return await asyncio.get_running_loop().run_in_executor(
            self._builders, _prepare_remote, url, self.settings, ids, now, worker, self.run
        )

    def close(self) -> None:
        if self._builders is not None:
            self._builders.shutdown(wait=True, cancel_futures=True)
            self._builders = None

    def links_for_token(self, token: str) -> tuple[Links, tuple[str, ...]]:
        """Footer links and List-Unsubscribe URIs.  With a public URL, the https one, and
        the mailto too when ``inbox.url`` is read (``bot.returns`` acts on those mails).
        Without one, the mailto is the only way out; with no inbox read, the operator
        acts on those mails by hand (README, "Unsubscribing")."""
        sender = self.settings.sender
        mailto = f"mailto:{sender.unsubscribe_address or sender.from_address}?subject=unsubscribe%20{token}"
        if self.settings.web.public_url:
            links = web_links(self.settings.web.public_url, token)
            if self.settings.inbox.url:
                return links, (links.unsubscribe_url, mailto)
            return links, (links.unsubscribe_url,)
        return Links(mailto, None), (mailto,)

    def message_bytes(self, session: Session, row: DigestRow, now: datetime) -> tuple[bytes, str, str]:
        """(message, envelope sender, envelope recipient) for one digest: the simple path."""
        return self._simple(row, digest_content(session, row.id), _resent_message_id(session, row), now)

    def _simple(
        self, row: DigestRow, content: DigestContent, resend_of: str | None, now: datetime
    ) -> tuple[bytes, str, str]:
        links, list_unsubscribe = self.links(content.subscriber)
        rendered = self.renderer.render(content, links)
        headers = Headers(
            to_name=content.subscriber.name,
            to_address=content.subscriber.email,
            message_id=row.message_id,
            date=now,
            list_unsubscribe=list_unsubscribe,
            resend_of=resend_of,
        )
        message = build_message(rendered, headers, self.settings.sender)
        envelope = envelope_for(headers, self.settings.sender)
        data = message_bytes(message)
        return (self.signer.sign(data) if self.signer else data), self.return_path(row.id), envelope.recipient

    def build(
        self, session: Session, rows: Sequence[DigestRow], now: datetime, *, for_wire: bool = False
    ) -> list[Built]:
        """Messages for a batch of digests, same bytes as ``message_bytes`` (apart
        from Date): bodies shared by several subscribers are rendered once.
        *for_wire*: spliced messages come ``Prepared`` for DATA (what delivery sends)."""
        return self.build_loaded(self.load(session, rows), now, for_wire=for_wire)

    def load(self, session: Session, rows: Sequence[DigestRow]) -> list[tuple[DigestRow, DigestContent, str | None]]:
        """What building needs from the store (``build_loaded`` then needs no session)."""
        contents = digest_contents(session, [row.id for row in rows], self.contents)
        return [(row, contents[row.id], _resent_message_id(session, row)) for row in rows]

    def build_loaded(
        self, loaded: Sequence[tuple[DigestRow, DigestContent, str | None]], now: datetime, *, for_wire: bool = False
    ) -> list[Built]:
        built = []
        # Digests of one batch share item objects: a cheap key finds their template once.
        in_batch: dict[tuple[object, ...], MessageTemplate | None] = {}
        for row, content, resend_of in loaded:
            try:
                template = None
                if self.splicing and content.resend_of is None:
                    quick = (
                        content.kind,
                        content.local_date,
                        content.pending,
                        content.subscriber.filter,
                        period_words(content),
                        tuple(map(id, content.items)),
                        content.updates,
                    )
                    if quick not in in_batch:
                        in_batch[quick] = self._template(content)
                    template = in_batch[quick]
                if template is None:
                    built.append(Built(row, *self._simple(row, content, resend_of, now)))
                    continue
                subscriber = content.subscriber
                recipient = envelope_address(subscriber.email)
                personal = Personal(
                    email=subscriber.email,
                    to_name=subscriber.name,
                    to_address=recipient,
                    token=make_token(self.key, subscriber.id, subscriber.unsubscribe_secret),
                    message_id=row.message_id,
                    date=now,
                )
                if self.signer is not None:  # signed after the splice: the bytes that go out
                    signed = self.signer.sign(template.fill(personal))
                    data = (prepared(signed) or signed) if for_wire else signed
                else:
                    data = template.fill_wire(personal) if for_wire else template.fill(personal)
                self.spliced += 1
                built.append(Built(row, data, self.return_path(row.id), recipient))
            except Exception as exc:  # a broken template or entry must not wedge the queue
                log.exception("digest %d: cannot build the message", row.id)
                built.append(
                    Built(
                        row, error=f"cannot build the message: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                    )
                )
        return built

    def _template(self, content: DigestContent) -> MessageTemplate | None:
        # Everything the body depends on but the subscriber's own values (render.personal_context).
        key = (
            content.kind,
            content.local_date,
            content.pending,
            content.subscriber.filter,
            period_words(content),
            content.items,
            content.updates,
        )
        found = self.templates.get(key, _UNSEEN)  # one hash of 30 items, not three
        if found is not _UNSEEN:
            self.templates.move_to_end(key)
            return cast(MessageTemplate | None, found)
        template = MessageTemplate.build(
            self.renderer,
            content,
            self.settings.sender,
            self.links_for_token,
            footer_substituted=self.footer_substituted,
            pool=self.chunks,
        )
        self.templates[key] = template
        while len(self.templates) > self.TEMPLATES or self.chunks.nbytes > self.TEMPLATE_BYTES:
            _, evicted = self.templates.popitem(last=False)
            if evicted is not None:
                evicted.release()
        return template


_REMOTE: dict[str, tuple[sessionmaker[Session], Mailer]] = {}  # per build process: its store and templates


def _prepare_remote(
    url: str, settings: Settings, ids: list[int], now: datetime, worker: str, run: str
) -> tuple[list[Built], DeliverReport]:
    """``_prepare_batch`` in a build process (``Mailer.prepare``), for the sending
    Mailer's delivery run *run*."""
    if url not in _REMOTE:
        from bot.store.engine import make_engine, sessions

        database = settings.database
        _REMOTE[url] = (
            sessions(
                make_engine(url, busy_timeout_ms=database.busy_timeout_ms, sqlite_cache_mb=database.sqlite_cache_mb)
            ),
            Mailer(settings),
        )
    factory, mailer = _REMOTE[url]
    if mailer.run != run:
        mailer.new_run(run)
    report = DeliverReport()
    return _prepare_batch(factory, mailer, ids, now=now, worker=worker, report=report), report


def _resent_message_id(session: Session, row: DigestRow) -> str | None:
    if row.resend_of is None:
        return None
    original = get_digest(session, row.resend_of)
    return original.message_id if original else None


def rule_keywords(path: Path | None) -> Keywords:
    """Each rule tag's keywords, to mark in digests; none when the rules cannot be read
    (ingest and planning report that file themselves)."""
    try:
        rules = load_rules(path)
    except TagRulesError:
        return ()
    return tuple((rule.name, rule.keywords) for rule in rules.rules)


def cancel_digests(
    session: Session, rows: Sequence[tuple[DigestRow, SubscriberStatus | None]], *, worker: str, now: datetime
) -> int:
    """Cancel claimed digests whose subscriber left (status given, None: deleted) and
    give their entries back; how many were cancelled."""
    finished = [
        Finished(row.id, DigestState.CANCELLED, None, f"subscriber {s.value if s else 'gone'}") for row, s in rows
    ]
    for row, _ in rows:
        if row.kind is not DigestKind.RESEND:
            release_entries(session, row.id)
    return len(finish_many(session, finished, worker=worker, now=now))


def _prepare_batch(
    factory: sessionmaker[Session], mailer: Mailer, ids: list[int], *, now: datetime, worker: str, report: DeliverReport
) -> list[Built]:
    """Messages for the claimed digests; cancels those whose subscriber left and
    fails those whose message cannot be built (recorded at once).  The store is
    read in one short transaction and messages are built after it: on SQLite
    every transaction holds the write lock, which senders need to record."""
    journal = journal_of(factory)
    journal.try_apply_pending(factory)
    with transaction(factory) as session:
        rows = get_digests(session, ids)
        statuses = subscriber_statuses(session, {row.subscriber_id for row in rows})
        for subscriber_id in journal.pending_subscribers(statuses):
            statuses[subscriber_id] = SubscriberStatus.UNSUBSCRIBED  # acknowledged, not applied yet
        live = [row for row in rows if statuses.get(row.subscriber_id) is SubscriberStatus.ACTIVE]
        gone = [
            (row, statuses.get(row.subscriber_id))
            for row in rows
            if statuses.get(row.subscriber_id) is not SubscriberStatus.ACTIVE
        ]
        report.cancelled += cancel_digests(session, gone, worker=worker, now=now)
        loaded = mailer.load(session, live)
    built = mailer.build_loaded(loaded, now, for_wire=True)
    failed = [Finished(b.row.id, DigestState.FAILED, None, b.error) for b in built if b.error is not None]
    if failed:
        with transaction(factory) as session:
            report.failed += len(finish_many(session, failed, worker=worker, now=now))
    return [b for b in built if b.error is None]
