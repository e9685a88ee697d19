"""Mail stage, batch building: claimed digests into ready-to-send messages (the
``Mailer``), spliced from one template per body where the bytes come out the same.

Reads the store (digest contents) and renders; never sends and never records an outcome.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy.orm import Session

from bot.domain import DigestContent, Subscriber
from bot.mail.constant_pool import ChunkPool
from bot.mail.framing import period_words
from bot.mail.message import (
    Headers,
    SmtpData,
    build_message,
    envelope_address,
    envelope_for,
    message_bytes,
    prepared,
)
from bot.mail.parts import Parts
from bot.mail.personal_slots import RecipientValues, footer_allows_substitution, templates_allow_splicing
from bot.mail.render import Links, Renderer, web_links
from bot.mail.splice import MessageTemplate
from bot.mail.verp import return_path
from bot.store.contents import ContentCache, digest_content, digest_contents
from bot.store.digests import DigestRow, get_digest
from bot.tokens import make_token

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class BuiltMessage:
    """One digest's message, or why there is none."""

    row: DigestRow
    data: bytes | SmtpData = b""
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

    def __init__(self, parts: Parts) -> None:
        settings = parts.settings
        self.settings = settings
        self.renderer = Renderer(
            settings.paths.templates_dir,
            search_url=settings.digest.search_url,
            remote_images=settings.digest.remote_images,
            summary_chars=settings.digest.summary_chars,
            keywords=parts.keywords,
            public_url=settings.web.public_url,
            top_picks=settings.digest.top_picks,
        )
        self.key = parts.key
        self.signer = parts.signer
        self.envelope_sender = envelope_address(settings.sender.from_address)
        self.templates: OrderedDict[tuple[object, ...], MessageTemplate | None] = OrderedDict()
        self.splicing = templates_allow_splicing(self.renderer)
        self.footer_substituted = footer_allows_substitution(self.renderer)
        self.chunks = ChunkPool()  # the templates' constant bytes
        self.spliced = 0  # messages made from a template (for tests and benchmarks)
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

    def links_for_token(self, token: str) -> tuple[Links, tuple[str, ...]]:
        """Footer links and List-Unsubscribe URIs.  With a public URL, the https one, and
        the mailto too when ``inbox.url`` is read (``bot.returns`` acts on those mails).
        Without one, the mailto is the only way out; with no inbox read, the operator
        acts on those mails by hand (docs/deliverability.md, "Unsubscribing")."""
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
    ) -> list[BuiltMessage]:
        """Messages for a batch of digests, same bytes as ``message_bytes`` (apart
        from Date): bodies shared by several subscribers are rendered once.
        *for_wire*: spliced messages come ``SmtpData`` for DATA (what delivery sends)."""
        return self.build_loaded(self.load(session, rows), now, for_wire=for_wire)

    def load(self, session: Session, rows: Sequence[DigestRow]) -> list[tuple[DigestRow, DigestContent, str | None]]:
        """What building needs from the store (``build_loaded`` then needs no session)."""
        contents = digest_contents(session, [row.id for row in rows], self.contents)
        return [(row, contents[row.id], _resent_message_id(session, row)) for row in rows]

    def build_loaded(
        self, loaded: Sequence[tuple[DigestRow, DigestContent, str | None]], now: datetime, *, for_wire: bool = False
    ) -> list[BuiltMessage]:
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
                        content.zotero_save,
                        content.zotero_broken,
                    )
                    if quick not in in_batch:
                        in_batch[quick] = self._template(content)
                    template = in_batch[quick]
                if template is None:
                    built.append(BuiltMessage(row, *self._simple(row, content, resend_of, now)))
                    continue
                subscriber = content.subscriber
                recipient = envelope_address(subscriber.email)
                personal = RecipientValues(
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
                built.append(BuiltMessage(row, data, self.return_path(row.id), recipient))
            except Exception as exc:  # a broken template or entry must not wedge the queue
                log.exception("digest %d: cannot build the message", row.id)
                built.append(
                    BuiltMessage(
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
            content.zotero_save,
            content.zotero_broken,
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


def _resent_message_id(session: Session, row: DigestRow) -> str | None:
    if row.resend_of is None:
        return None
    original = get_digest(session, row.resend_of)
    return original.message_id if original else None
