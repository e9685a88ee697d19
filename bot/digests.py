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
import logging
import os
import socket
import uuid
import zoneinfo
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.deliver import Outcome, SendResult, SmtpPool, backoff_seconds
from bot.domain import Subscriber, SubscriberStatus
from bot.message import Headers, build_message, envelope_for, message_id_for
from bot.render import Links, Renderer, primary_url
from bot.select import SelectionCache, local_send_time, select_for
from bot.store.digests import (
    DigestKind,
    DigestRow,
    DigestState,
    Planned,
    claim_due,
    claimed_entry_ids,
    count_bounce,
    create_digest,
    digest_content,
    finish,
    get_digest,
    list_digests,
    release_entries,
    reset_bounces,
    scheduled_days,
    set_message_id,
)
from bot.store.engine import transaction
from bot.store.subscribers import get_subscriber_by_id, list_subscribers
from bot.tagging import TagRules
from bot.tokens import make_token, signing_key

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def worker_name() -> str:
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# --- planning -------------------------------------------------------------------


@dataclass
class PlanReport:
    planned: list[int] = field(default_factory=list)  # digest ids queued
    empty: int = 0  # due subscribers with nothing new
    not_due: int = 0


def local_today(subscriber: Subscriber, now: datetime) -> date:
    return now.astimezone(zoneinfo.ZoneInfo(subscriber.timezone)).date()


def _plan_one(
    session: Session,
    settings: Settings,
    rules: TagRules,
    subscriber: Subscriber,
    *,
    now: datetime,
    local_date: date,
    kind: DigestKind,
    cache: SelectionCache,
) -> int | None:
    candidates = select_for(
        session, subscriber, rules, as_of=now, exclude=claimed_entry_ids(session, subscriber.id), cache=cache
    )
    chosen = candidates[: settings.digest.max_entries]
    if not chosen and not settings.digest.send_empty:
        if kind is DigestKind.SCHEDULED:
            # Remember the day was handled, so the planner does not look again every minute.
            create_digest(
                session, subscriber_id=subscriber.id, local_date=local_date, kind=kind, state=DigestState.EMPTY,
                now=now, entries=[], message_id="",
            )
        return None
    digest_id = create_digest(
        session,
        subscriber_id=subscriber.id,
        local_date=local_date,
        kind=kind,
        state=DigestState.QUEUED,
        now=now,
        entries=[
            Planned(
                c.entry.id,
                c.entry.summary_source_id,
                c.explanation.why(),
                c.entry.tags,
                primary_url(c.entry, settings.digest.search_url),
            )
            for c in chosen
        ],
        message_id="",
        pending=len(candidates) - len(chosen),
    )
    set_message_id(session, digest_id, message_id_for(digest_id, subscriber.id, local_date, kind.value, settings.sender))
    return digest_id


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
    (or every one, with *all_due*) and who has none for today; one transaction each."""
    report = PlanReport()
    if subscribers is None:
        with factory() as session:
            subscribers = list_subscribers(session, status=SubscriberStatus.ACTIVE)
    subscribers = [s for s in subscribers if s.status is SubscriberStatus.ACTIVE]
    due: list[tuple[Subscriber, date]] = []
    for subscriber in subscribers:
        day = local_today(subscriber, now)
        if kind is DigestKind.SCHEDULED and not all_due and now < local_send_time(subscriber, day):
            report.not_due += 1
            continue
        due.append((subscriber, day))
    if kind is DigestKind.SCHEDULED:
        with factory() as session:
            done = scheduled_days(session, [s.id for s, _ in due], {d for _, d in due})
        due = [(s, d) for s, d in due if (s.id, d) not in done]
    cache = SelectionCache()
    for subscriber, day in due:
        try:
            with transaction(factory) as session:
                digest_id = _plan_one(
                    session, settings, rules, subscriber, now=now, local_date=day, kind=kind, cache=cache
                )
        except IntegrityError:
            continue  # another planner took this subscriber's day (or entries) first
        if digest_id is None:
            report.empty += 1
        else:
            report.planned.append(digest_id)
    return report


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


class Mailer:
    """Everything needed to turn a digest id into bytes on the wire."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.renderer = Renderer(
            settings.paths.templates_dir, search_url=settings.digest.search_url, remote_images=settings.digest.remote_images
        )
        self.key = signing_key(settings)

    def links(self, subscriber: Subscriber) -> tuple[Links, tuple[str, ...]]:
        token = make_token(self.key, subscriber.id, subscriber.unsubscribe_secret)
        sender = self.settings.sender
        mailto = f"mailto:{sender.unsubscribe_address or sender.from_address}?subject=unsubscribe%20{token}"
        public = self.settings.web.public_url.rstrip("/")
        if public:
            https = f"{public}/u/{token}"
            return Links(https, f"{public}/m/{token}"), (https, mailto)
        return Links(mailto, None), (mailto,)

    def message_bytes(self, session: Session, row: DigestRow, now: datetime) -> tuple[bytes, str, str]:
        """(message, envelope sender, envelope recipient) for one digest."""
        content = digest_content(session, row.id)
        resend_of = None
        if row.resend_of is not None:
            original = get_digest(session, row.resend_of)
            resend_of = original.message_id if original else None
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


async def deliver(
    factory: sessionmaker[Session],
    settings: Settings,
    mailer: Mailer,
    pool: SmtpPool,
    *,
    clock: Clock,
    worker: str | None = None,
    batch: int = 50,
    stop: asyncio.Event | None = None,
    progress: Callable[[int], None] | None = None,
) -> DeliverReport:
    """Send every digest due now, batch by batch, until none is left (or *stop* is set
    between batches: sends in flight always finish and are recorded)."""
    worker = worker or worker_name()
    total = DeliverReport()
    while stop is None or not stop.is_set():
        now = clock()
        with transaction(factory) as session:
            ids = claim_due(session, now=now, worker=worker, lease_seconds=settings.digest.lease_seconds, limit=batch)
        if not ids:
            break
        total.add(await _deliver_batch(factory, settings, mailer, pool, ids, clock=clock, worker=worker))
        if progress is not None:
            progress(len(ids))
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
    async with SmtpPool(settings.smtp, settings.smtp.resolved_password()) as pool:
        return await deliver(factory, settings, mailer, pool, clock=clock, progress=progress)


def due_count(factory: sessionmaker[Session], now: datetime) -> int:
    from bot.store.digests import count_due

    with factory() as session:
        return count_due(session, now)


async def _deliver_batch(
    factory: sessionmaker[Session],
    settings: Settings,
    mailer: Mailer,
    pool: SmtpPool,
    ids: list[int],
    *,
    clock: Clock,
    worker: str,
) -> DeliverReport:
    report = DeliverReport()
    jobs: list[asyncio.Future[tuple[tuple[int, int, int], SendResult]]] = []
    for digest_id in ids:
        with transaction(factory) as session:
            row = get_digest(session, digest_id)
            assert row is not None
            subscriber = get_subscriber_by_id(session, row.subscriber_id)
            if subscriber is None or subscriber.status is not SubscriberStatus.ACTIVE:
                finish(session, digest_id, worker=worker, state=DigestState.CANCELLED, now=clock(), code=None,
                       error=f"subscriber {subscriber.status.value if subscriber else 'gone'}")
                if row.kind is not DigestKind.RESEND:
                    release_entries(session, digest_id)
                report.cancelled += 1
                continue
            try:
                data, sender, recipient = mailer.message_bytes(session, row, clock())
            except Exception as exc:  # a broken template or entry must not wedge the queue
                log.exception("digest %d: cannot build the message", digest_id)
                error = f"cannot build the message: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                finish(session, digest_id, worker=worker, state=DigestState.FAILED, now=clock(), code=None, error=error)
                report.failed += 1
                continue
        jobs.append(asyncio.ensure_future(_send(pool, (digest_id, row.subscriber_id, row.attempts), sender, recipient, data)))
    # Recorded as each send finishes, not in batch order: what a crash can send
    # twice is only what the server accepted and we had no moment to record.
    for finished in asyncio.as_completed(jobs):
        (digest_id, subscriber_id, attempts), result = await finished
        _record(factory, settings, digest_id, subscriber_id, attempts, result, worker=worker, now=clock(), report=report)
    return report


async def _send(
    pool: SmtpPool, job: tuple[int, int, int], sender: str, recipient: str, data: bytes
) -> tuple[tuple[int, int, int], SendResult]:
    return job, await pool.send(sender, recipient, data)


def _record(
    factory: sessionmaker[Session],
    settings: Settings,
    digest_id: int,
    subscriber_id: int,
    attempts: int,
    result: SendResult,
    *,
    worker: str,
    now: datetime,
    report: DeliverReport,
) -> None:
    smtp = settings.smtp
    with transaction(factory) as session:
        if result.outcome is Outcome.SENT:
            state, retry_at = DigestState.SENT, None
        elif result.outcome is Outcome.TEMPORARY and attempts < smtp.max_attempts:
            state, retry_at = DigestState.RETRY_WAIT, now + timedelta(seconds=backoff_seconds(attempts, smtp))
        else:
            state, retry_at = DigestState.FAILED, None
        error = None if state is DigestState.SENT else f"attempt {attempts}: {result.detail}"
        if not finish(session, digest_id, worker=worker, state=state, now=now, code=result.code, error=error,
                      retry_at=retry_at):
            report.lost_lease += 1  # someone reclaimed it after our lease ran out
            return
        if state is DigestState.SENT:
            reset_bounces(session, subscriber_id)
            report.sent += 1
        elif state is DigestState.RETRY_WAIT:
            report.retrying += 1
        else:
            report.failed += 1
            if result.outcome is Outcome.PERMANENT and result.code in smtp.bounce_codes:
                if count_bounce(session, subscriber_id, threshold=smtp.bounce_threshold, now=now):
                    report.bounced += 1
    log.info("digest %d: %s (%s)", digest_id, state.value, result.detail)


# --- manual sends and resends ------------------------------------------------------


class DigestNotFound(LookupError):
    pass


def resend(factory: sessionmaker[Session], settings: Settings, digest_id: int, *, now: datetime) -> int:
    """Queue a copy of a digest: same entries and pinned summaries, a new
    Message-ID, recorded as a resend; the ledger is not touched."""
    with transaction(factory) as session:
        original = get_digest(session, digest_id)
        if original is None or original.state is DigestState.EMPTY:
            raise DigestNotFound(f"no digest #{digest_id} with entries")
        source = original.resend_of if original.kind is DigestKind.RESEND and original.resend_of else original.id
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
            session, new_id, message_id_for(new_id, original.subscriber_id, original.local_date, "resend", settings.sender)
        )
        return new_id


def find_scheduled(factory: sessionmaker[Session], subscriber_id: int, day: date) -> DigestRow | None:
    with factory() as session:
        rows = list_digests(session, subscriber_id=subscriber_id, local_date=day, kind=DigestKind.SCHEDULED)
    return rows[0] if rows else None


def failed_digests(factory: sessionmaker[Session]) -> list[DigestRow]:
    with factory() as session:
        return list_digests(session, state=DigestState.FAILED)
