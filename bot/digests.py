"""Digest service (the campaign manager): plan who is due, deliver what is due.

Planning decides from the database alone: a subscriber is due once their
local send time has passed today and they have no scheduled digest for that
local day (a partial unique index makes a second one impossible).  A digest
claims its entries in the ledger when planned; it counts as delivered only
when the SMTP server answered 250 after DATA.

The one duplicate window: the process dies after the server's 250 and before
the ``sent`` commit.  The row is still ``sending``; when its lease expires it
is sent again, with the same Message-ID.  At most the messages in flight at
the crash are affected.

Never talks SMTP itself (``deliver``), never formats mail (``render``/``message``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import multiprocessing
import os
import socket
import time
import uuid
import zoneinfo
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import cast

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.deliver import Outcome, SendResult, SmtpPool, backoff_seconds
from bot.domain import DigestContent, DigestKind, DigestState, EntryView, Subscriber, SubscriberStatus
from bot.message import Headers, Prepared, build_message, envelope_address, envelope_for, message_id_for
from bot.render import Links, Renderer, primary_url
from bot.select import Candidate, SelectionCache, effective_start, local_send_time, select_for
from bot.splice import ChunkPool, MessageTemplate, Personal, footer_allows_substitution, templates_allow_splicing
from bot.store.digests import (
    ContentCache,
    DigestRow,
    Finished,
    NewDigest,
    Planned,
    claim_due,
    claimed_from,
    count_bounce,
    create_digest,
    digest_content,
    digest_contents,
    failed_without_resend,
    finish_many,
    get_digest,
    get_digests,
    insert_digests,
    list_digests,
    lock_digest,
    pending_resend_of,
    release_entries,
    reset_bounces,
    scheduled_days,
    set_message_id,
)
from bot.store.engine import transaction
from bot.store.subscribers import set_watermarks, subscriber_statuses, subscribers_after, watermarks
from bot.tagging import TagRules
from bot.tokens import make_token, signing_key

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def worker_name() -> str:
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# --- planning -------------------------------------------------------------------


class IdRuns:
    """Ids in the order they were added, kept as runs of consecutive numbers.

    A planning pass may queue a million digests, and a batch's digests get
    consecutive ids (only its empty digests break a run): runs hold them in a
    fraction of a list's or an array's memory (bench/README.md, planning)."""

    __slots__ = ("_starts", "_lengths", "_count")

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._starts = array("q")
        self._lengths = array("q")
        self._count = 0
        for value in ids:
            self.append(value)

    def append(self, value: int) -> None:
        if self._starts and self._starts[-1] + self._lengths[-1] == value:
            self._lengths[-1] += 1
        else:
            self._starts.append(value)
            self._lengths.append(1)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        for start, length in zip(self._starts, self._lengths, strict=True):
            yield from range(start, start + length)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdRuns) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"IdRuns({list(self)!r})"


@dataclass
class PlanReport:
    planned: IdRuns = field(default_factory=IdRuns)  # digest ids queued, in order
    empty: int = 0  # due subscribers with nothing new
    not_due: int = 0


def local_today(subscriber: Subscriber, now: datetime) -> date:
    return now.astimezone(zoneinfo.ZoneInfo(subscriber.timezone)).date()


PLAN_BATCH = 1000  # subscribers read, selected for and written per transaction
# Entries first seen this long before a watermark are weighed again: an ingest
# that began before a planning pass but committed after it is not skipped.
WATERMARK_MARGIN = timedelta(hours=1)


def planned_key(subscriber: Subscriber, rules: TagRules) -> str:
    """What a watermark is valid for: the subscriber's filter and backfill and the tag rules."""
    return _planned_key(subscriber.filter, subscriber.backfill, rules.fingerprint)


@lru_cache(maxsize=4096)  # subscribers share a few hundred filters
def _planned_key(filter_text: str, backfill: str, rules_fingerprint: str) -> str:
    text = f"{filter_text}\x00{backfill}\x00{rules_fingerprint}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def plan(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    *,
    now: datetime,
    all_due: bool = False,
    subscribers: Iterable[Subscriber] | None = None,
    kind: DigestKind = DigestKind.SCHEDULED,
) -> PlanReport:
    """Queue a digest for every active subscriber whose send time has passed today
    (or every one, with *all_due*) and who has none for today.

    Set-based: subscribers are read in batches of ``PLAN_BATCH`` by id; each
    (filter, window) is ranked once per pass (``SelectionCache``); a batch's
    digests and ledger rows are written in one transaction.  A subscriber's
    window starts at their watermark (less a margin) when they have a valid one,
    so planning reads about a day of entries and ledger rows per subscriber
    however long the history; the result is what the whole window would give,
    because every entry behind the watermark was claimed or did not match."""
    report = PlanReport()
    cache = SelectionCache()
    memo: dict[tuple[int, int], Planned] = {}
    if subscribers is not None:
        chosen = [s for s in subscribers if s.status is SubscriberStatus.ACTIVE]
        batches: Iterable[list[Subscriber]] = (chosen[i : i + PLAN_BATCH] for i in range(0, len(chosen), PLAN_BATCH))
    else:
        batches = _active_batches(factory)
    for batch in batches:
        due: list[tuple[Subscriber, date]] = []
        for subscriber in batch:
            day = local_today(subscriber, now)
            if kind is DigestKind.SCHEDULED and not all_due and now < local_send_time(subscriber, day):
                report.not_due += 1
                continue
            due.append((subscriber, day))
        if due:
            _plan_batch(factory, settings, rules, due, now=now, kind=kind, cache=cache, memo=memo, report=report)
    return report


def _active_batches(factory: sessionmaker[Session]) -> Iterable[list[Subscriber]]:
    after = 0
    while True:
        with factory() as session:
            batch = subscribers_after(session, after, PLAN_BATCH, status=SubscriberStatus.ACTIVE)
        if not batch:
            return
        yield batch
        after = batch[-1].id


def _plan_batch(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    due: list[tuple[Subscriber, date]],
    *,
    now: datetime,
    kind: DigestKind,
    cache: SelectionCache,
    memo: dict[tuple[int, int], Planned],
    report: PlanReport,
) -> None:
    choices: list[NewDigest] = []
    marks: list[tuple[int, datetime, str]] = []
    with factory() as session:
        if kind is DigestKind.SCHEDULED:
            done = scheduled_days(session, [s.id for s, _ in due], {d for _, d in due})
            due = [(s, d) for s, d in due if (s.id, d) not in done]
        known = watermarks(session, [s.id for s, _ in due])
        keys = {s.id: planned_key(s, rules) for s, _ in due}
        starts: dict[int, datetime | None] = {}
        for subscriber, _ in due:
            mark = known.get(subscriber.id)
            starts[subscriber.id] = mark[0] - WATERMARK_MARGIN if mark and mark[1] == keys[subscriber.id] else None
        # The ledger read per window: the batch's rows of the window's entries
        # (subscribers whose windows start together share the read).
        by_window: dict[datetime | None, tuple[list[EntryView], list[int]]] = {}
        for subscriber, _ in due:
            start = effective_start(subscriber, starts[subscriber.id])
            window = cache.entries(session, start, now)
            if window:
                by_window.setdefault(start, (window, []))[1].append(subscriber.id)
        claimed: dict[int, set[int]] = {}
        for window, ids in by_window.values():
            claimed.update(claimed_from(session, ids, [entry.id for entry in window]))
        for subscriber, day in due:
            candidates = select_for(
                session,
                subscriber,
                rules,
                as_of=now,
                cache=cache,
                start=starts[subscriber.id],
                exclude=claimed.get(subscriber.id, frozenset()),
            )
            chosen = candidates[: settings.digest.max_entries]
            pending = len(candidates) - len(chosen)
            if pending == 0:
                marks.append((subscriber.id, now, keys[subscriber.id]))
            if not chosen and not settings.digest.send_empty:
                if kind is not DigestKind.SCHEDULED:
                    report.empty += 1
                    continue
                # Remember the day was handled, so the planner does not look again every minute.
                state = DigestState.EMPTY
            else:
                state = DigestState.QUEUED
            entries = [_planned_entry(c, settings, memo) for c in chosen]
            choices.append(NewDigest(subscriber.id, day, kind, state, entries, pending))
    make_id = _message_id(settings)
    written: list[tuple[int, NewDigest]] = []
    try:
        with transaction(factory) as session:
            ids = insert_digests(session, choices, now=now, message_id=make_id)
            set_watermarks(session, marks)
        written = list(zip(ids, choices, strict=True))
    except IntegrityError:
        # Another planner took some of these subscribers' days (or entries) first:
        # write the others one by one and leave those alone.
        for choice in choices:
            try:
                with transaction(factory) as session:
                    (digest_id,) = insert_digests(session, [choice], now=now, message_id=make_id)
                    set_watermarks(session, [m for m in marks if m[0] == choice.subscriber_id])
            except IntegrityError:
                continue
            written.append((digest_id, choice))
    for digest_id, choice in written:
        if choice.state is DigestState.EMPTY:
            report.empty += 1
        else:
            report.planned.append(digest_id)


def _planned_entry(candidate: Candidate, settings: Settings, memo: dict[tuple[int, int], Planned]) -> Planned:
    """The ledger row's content; the same for every subscriber of one filter, so made once a pass."""
    key = (id(candidate.explanation), candidate.entry.id)  # explanations live as long as the pass's cache
    if key not in memo:
        entry = candidate.entry
        memo[key] = Planned(
            entry.id,
            entry.summary_source_id,
            candidate.explanation.why(),
            entry.tags,
            primary_url(entry, settings.digest.search_url),
        )
    return memo[key]


def _message_id(settings: Settings) -> Callable[[int, NewDigest], str]:
    def make(digest_id: int, digest: NewDigest) -> str:
        return message_id_for(digest_id, digest.subscriber_id, digest.local_date, digest.kind.value, settings.sender)

    return make


# --- delivery --------------------------------------------------------------------


@dataclass
class DeliverReport:
    sent: int = 0
    retrying: int = 0
    failed: int = 0
    bounced: int = 0
    cancelled: int = 0
    lost_lease: int = 0

    def add(self, other: DeliverReport) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


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
    into a ``MessageTemplate`` and filled per subscriber (``bot.splice``)."""

    TEMPLATES = 512  # distinct bodies kept; a day has about one per filter and window ...
    TEMPLATE_BYTES = 48 << 20  # ... and no more distinct bytes than this (bodies share most of theirs)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.renderer = Renderer(
            settings.paths.templates_dir,
            search_url=settings.digest.search_url,
            remote_images=settings.digest.remote_images,
        )
        self.key = signing_key(settings)
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
        """Footer links and List-Unsubscribe URIs (https first when there is a public URL)."""
        sender = self.settings.sender
        mailto = f"mailto:{sender.unsubscribe_address or sender.from_address}?subject=unsubscribe%20{token}"
        public = self.settings.web.public_url.rstrip("/")
        if public:
            https = f"{public}/u/{token}"
            return Links(https, f"{public}/m/{token}"), (https, mailto)
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
        return message.as_bytes(), envelope.sender, envelope.recipient

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
                        tuple(map(id, content.items)),
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
                data = template.fill_wire(personal) if for_wire else template.fill(personal)
                self.spliced += 1
                built.append(Built(row, data, self.envelope_sender, recipient))
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
        key = (content.kind, content.local_date, content.pending, content.subscriber.filter, content.items)
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


async def deliver(
    factory: sessionmaker[Session],
    settings: Settings,
    mailer: Mailer,
    pool: SmtpPool,
    *,
    clock: Clock,
    worker: str | None = None,
    batch: int = 200,
    stop: asyncio.Event | None = None,
    progress: Callable[[int], None] | None = None,
) -> DeliverReport:
    """Send every digest due now, batch by batch, until none is left (or *stop* is set
    between batches: sends in flight always finish and are recorded).  The next
    batch is claimed and built while the previous one is on the wire."""
    worker = worker or worker_name()
    mailer.new_run()
    total = DeliverReport()
    ahead = max(1, settings.digest.build_processes)  # batches being built while one is sent
    building: deque[tuple[asyncio.Future[tuple[list[Built], DeliverReport]], int]] = deque()
    sending: asyncio.Future[DeliverReport] | None = None
    sending_count = 0

    async def sent() -> None:
        nonlocal sending
        if sending is not None:
            total.add(await sending)
            sending = None
            if progress is not None:
                progress(sending_count)

    async def send_next() -> None:
        """The oldest batch being built, once built, goes on the wire after the one there."""
        nonlocal sending, sending_count
        future, count = building.popleft()
        built, report = await future
        total.add(report)
        await sent()
        sending = asyncio.ensure_future(_send_batch(factory, settings, pool, built, clock=clock, worker=worker))
        sending_count = count

    try:
        while True:
            while len(building) < ahead and (stop is None or not stop.is_set()):
                now = clock()
                with transaction(factory) as session:
                    ids = claim_due(
                        session, now=now, worker=worker, lease_seconds=settings.digest.lease_seconds, limit=batch
                    )
                if not ids:
                    break
                building.append((asyncio.ensure_future(mailer.prepare(factory, ids, now=now, worker=worker)), len(ids)))
            if not building:
                break
            await send_next()
    finally:
        # Claimed batches are still built and sent when *stop* is set (their leases
        # would otherwise hold them back until they expire); whatever happens to
        # them, the batch on the wire is waited for and recorded.
        try:
            while building:
                await send_next()
        finally:
            await sent()
    return total


async def deliver_now(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    clock: Clock,
    progress: Callable[[int], None] | None = None,
) -> DeliverReport:
    """Open a pool, deliver everything due, close the pool (the CLI's one-shot path)."""
    mailer = Mailer(settings)
    try:
        async with SmtpPool(settings.smtp, settings.smtp.resolved_password()) as pool:
            return await deliver(factory, settings, mailer, pool, clock=clock, progress=progress)
    finally:
        mailer.close()


def due_count(factory: sessionmaker[Session], now: datetime) -> int:
    from bot.store.digests import count_due

    with factory() as session:
        return count_due(session, now)


# Outcomes are written in small groups: one transaction per message would cost
# more than building it.  Until written, a sent digest is still ``sending``, so
# a crash can send it again: the window is this many messages or this long.
RECORD_EVERY = 64
RECORD_SECONDS = 0.2


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


def _prepare_batch(
    factory: sessionmaker[Session], mailer: Mailer, ids: list[int], *, now: datetime, worker: str, report: DeliverReport
) -> list[Built]:
    """Messages for the claimed digests; cancels those whose subscriber left and
    fails those whose message cannot be built (recorded at once).  The store is
    read in one short transaction and messages are built after it: on SQLite
    every transaction holds the write lock, which senders need to record."""
    with transaction(factory) as session:
        rows = get_digests(session, ids)
        statuses = subscriber_statuses(session, {row.subscriber_id for row in rows})
        live, gone = [], []
        for row in rows:
            status = statuses.get(row.subscriber_id)
            if status is SubscriberStatus.ACTIVE:
                live.append(row)
                continue
            gone.append(
                Finished(row.id, DigestState.CANCELLED, None, f"subscriber {status.value if status else 'gone'}")
            )
            if row.kind is not DigestKind.RESEND:
                release_entries(session, row.id)
        report.cancelled += len(finish_many(session, gone, worker=worker, now=now))
        loaded = mailer.load(session, live)
    built = mailer.build_loaded(loaded, now, for_wire=True)
    failed = [Finished(b.row.id, DigestState.FAILED, None, b.error) for b in built if b.error is not None]
    if failed:
        with transaction(factory) as session:
            report.failed += len(finish_many(session, failed, worker=worker, now=now))
    return [b for b in built if b.error is None]


async def _send_batch(
    factory: sessionmaker[Session],
    settings: Settings,
    pool: SmtpPool,
    built: list[Built],
    *,
    clock: Clock,
    worker: str,
) -> DeliverReport:
    report = DeliverReport()
    results: asyncio.Queue[tuple[DigestRow, SendResult | BaseException]] = asyncio.Queue()

    async def send(message: Built) -> None:
        try:
            results.put_nowait((message.row, await pool.send(message.sender, message.recipient, message.data)))
        except Exception as exc:  # a bug, not an SMTP outcome: the loop below raises it
            results.put_nowait((message.row, exc))

    jobs = [asyncio.ensure_future(send(b)) for b in built]
    # Recorded as sends finish, not in batch order: what a crash can send twice
    # is only what the server accepted and was not yet recorded.
    done: list[tuple[DigestRow, SendResult]] = []
    first_done_at = 0.0
    for _ in range(len(jobs)):
        wait = None if not done else max(0.0, first_done_at + RECORD_SECONDS - time.monotonic())
        try:
            outcome = await asyncio.wait_for(results.get(), wait)
        except TimeoutError:
            _record(factory, settings, done, worker=worker, now=clock(), report=report)
            done = []
            outcome = await results.get()
        if isinstance(outcome[1], BaseException):
            _record(factory, settings, done, worker=worker, now=clock(), report=report)
            raise outcome[1]
        if not done:
            first_done_at = time.monotonic()
        done.append((outcome[0], outcome[1]))
        if len(done) >= RECORD_EVERY:
            _record(factory, settings, done, worker=worker, now=clock(), report=report)
            done = []
    _record(factory, settings, done, worker=worker, now=clock(), report=report)
    await asyncio.gather(*jobs)  # all finished: surfaces an unexpected error instead of losing it
    return report


def _record(
    factory: sessionmaker[Session],
    settings: Settings,
    outcomes: list[tuple[DigestRow, SendResult]],
    *,
    worker: str,
    now: datetime,
    report: DeliverReport,
) -> None:
    if not outcomes:
        return
    smtp = settings.smtp
    finished = []
    for row, result in outcomes:
        if result.outcome is Outcome.SENT:
            state, retry_at = DigestState.SENT, None
        elif result.outcome is Outcome.TEMPORARY and row.attempts < smtp.max_attempts:
            state, retry_at = DigestState.RETRY_WAIT, now + timedelta(seconds=backoff_seconds(row.attempts, smtp))
        else:
            state, retry_at = DigestState.FAILED, None
        error = None if state is DigestState.SENT else f"attempt {row.attempts}: {result.detail}"
        finished.append(Finished(row.id, state, result.code, error, retry_at))
    with transaction(factory) as session:
        recorded = finish_many(session, finished, worker=worker, now=now)
        report.lost_lease += len(finished) - len(recorded)  # reclaimed by someone after our lease ran out
        reset_bounces(
            session,
            [
                row.subscriber_id
                for (row, _), f in zip(outcomes, finished, strict=True)
                if f.state is DigestState.SENT and row.id in recorded
            ],
        )
        for (row, result), outcome in zip(outcomes, finished, strict=True):
            if row.id not in recorded:
                continue
            if outcome.state is DigestState.SENT:
                report.sent += 1
            elif outcome.state is DigestState.RETRY_WAIT:
                report.retrying += 1
            else:
                report.failed += 1
                if result.outcome is Outcome.PERMANENT and result.code in smtp.bounce_codes:
                    if count_bounce(session, row.subscriber_id, threshold=smtp.bounce_threshold, now=now):
                        report.bounced += 1
            log.info("digest %d: %s (%s)", row.id, outcome.state.value, result.detail)


# --- manual sends and resends ------------------------------------------------------


class DigestNotFound(LookupError):
    pass


class ResendPending(ValueError):
    """A resend of this digest is already on its way."""


def resend(factory: sessionmaker[Session], settings: Settings, digest_id: int, *, now: datetime) -> int:
    """Queue a copy of a digest: same entries and pinned summaries, a new
    Message-ID, recorded as a resend of the original; the ledger is not touched.
    A digest with a resend still on its way gets no second one."""
    with transaction(factory) as session:
        original = get_digest(session, digest_id)
        if original is None or original.state is DigestState.EMPTY:
            raise DigestNotFound(f"no digest #{digest_id} with entries")
        source = original.resend_of if original.kind is DigestKind.RESEND and original.resend_of else original.id
        lock_digest(session, source)  # two resends at once must not both pass the check below
        pending = pending_resend_of(session, source)
        if pending is not None:
            raise ResendPending(f"digest #{source} already has resend #{pending} on its way")
        new_id = create_digest(
            session,
            subscriber_id=original.subscriber_id,
            local_date=original.local_date,
            kind=DigestKind.RESEND,
            state=DigestState.QUEUED,
            now=now,
            entries=[],
            message_id="",
            resend_of=source,
        )
        set_message_id(
            session,
            new_id,
            message_id_for(new_id, original.subscriber_id, original.local_date, "resend", settings.sender),
        )
        return new_id


def resend_failed(factory: sessionmaker[Session], settings: Settings, *, now: datetime) -> list[int]:
    """One resend for each failed digest that no resend has delivered or is delivering
    (failed resends are not resent themselves: their original is); run twice, it
    queues nothing the second time while the first run's resends are on their way
    or delivered."""
    with factory() as session:
        targets = failed_without_resend(session)
    queued = []
    for digest_id in targets:
        try:
            queued.append(resend(factory, settings, digest_id, now=now))
        except ResendPending:  # another run queued it meanwhile
            continue
    return queued


def find_scheduled(factory: sessionmaker[Session], subscriber_id: int, day: date) -> DigestRow | None:
    with factory() as session:
        rows = list_digests(session, subscriber_id=subscriber_id, local_date=day, kind=DigestKind.SCHEDULED)
    return rows[0] if rows else None
