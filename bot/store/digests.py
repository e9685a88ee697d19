"""Store: digests once queued: claiming due ones under a lease, recording outcomes,
bounces, resend look-ups and per-day counts.  SQL only; the retry and bounce rules
live in ``bot.delivery``, the ledger in ``ledger``, what a digest carries in ``contents``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from pathlib import PurePath
from typing import Any, cast

from sqlalchemy import CursorResult, and_, bindparam, case, exists, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from bot.domain import DigestKind, DigestState
from bot.domain.stored import stored_hour, stored_zone
from bot.store.base import UTCDateTime
from bot.store.bulk import chunks
from bot.store.schema import BodyItem, Digest, Entry, Source
from bot.store.schema import Subscriber as SubscriberRow


def set_message_id(session: Session, digest_id: int, message_id: str) -> None:
    session.execute(update(Digest).where(Digest.id == digest_id).values(message_id=message_id))


def expire_leases(session: Session, now: datetime) -> int:
    """End every lease at once (the digests in ``sending`` become due again).
    Only for a worker that knows it is the only one: on SQLite, after a crash."""
    result = session.execute(
        update(Digest)
        .where(Digest.state == DigestState.SENDING.value)
        .values(lease_expires_at=now - timedelta(seconds=1))
    )
    return int(cast(CursorResult[Any], result).rowcount or 0)


def _due_queries(now: datetime) -> list[Any]:
    """(next_attempt_at, id) of each due digest, one query per state: queued or
    retry_wait whose time has come, and sending whose lease ran out."""
    columns = (Digest.next_attempt_at, Digest.id)
    waiting = [
        select(*columns).where(Digest.state == state.value, Digest.next_attempt_at <= now)
        for state in (DigestState.QUEUED, DigestState.RETRY_WAIT)
    ]
    expired = select(*columns).where(Digest.state == DigestState.SENDING.value, Digest.lease_expires_at < now)
    return [*waiting, expired]


def count_due(session: Session, now: datetime) -> int:
    return sum(session.scalar(select(func.count()).select_from(query.subquery())) or 0 for query in _due_queries(now))


LIVE_STATES = (DigestState.QUEUED, DigestState.SENDING, DigestState.RETRY_WAIT)


def live_counts(session: Session) -> dict[DigestState, int]:
    """How many digests wait in each state that is not final (``ix_digests_due``'s
    ranges: the cost follows the queue, not the history)."""
    query = (
        select(Digest.state, func.count())
        .where(Digest.state.in_([s.value for s in LIVE_STATES]))
        .group_by(Digest.state)
    )
    counts = {state: 0 for state in LIVE_STATES}
    counts.update({DigestState(state): int(n) for state, n in session.execute(query)})
    return counts


def oldest_due_at(session: Session, now: datetime) -> datetime | None:
    """When the digest that has waited longest among those due now became due."""
    firsts = [session.scalar(select(func.min(q.subquery().c.next_attempt_at))) for q in _due_queries(now)]
    found = [f for f in firsts if f is not None]
    return min(found) if found else None


def claim_due(session: Session, *, now: datetime, worker: str, lease_seconds: int, limit: int) -> list[int]:
    """Take up to *limit* digests that are due (queued, retry time reached, or a
    ``sending`` whose lease expired), oldest ``next_attempt_at`` first, and lease
    them to *worker*.

    One query per state, each an index range read in order (``ix_digests_due``
    is state, next_attempt_at, id), merged here: one query over all three
    states made the database collect and sort every due digest to return the
    first *limit*, so claiming a million-digest day batch by batch grew with the
    square of its size.  On PostgreSQL the rows are locked with ``FOR UPDATE
    SKIP LOCKED``: workers claiming at the same moment get disjoint batches
    instead of waiting (rows read but not taken stay locked only until this
    transaction ends).  On SQLite (one writer at a time, BEGIN IMMEDIATE) the
    clause is not needed."""
    postgres = session.get_bind().dialect.name == "postgresql"
    due: list[tuple[datetime, int]] = []
    for query in _due_queries(now):
        query = query.order_by(Digest.next_attempt_at, Digest.id).limit(limit)
        if postgres:
            query = query.with_for_update(skip_locked=True)
        due.extend((at, digest_id) for at, digest_id in session.execute(query))
    ids = [digest_id for _, digest_id in sorted(due)[:limit]]
    if ids:
        session.execute(
            update(Digest)
            .where(Digest.id.in_(ids))
            .values(
                state=DigestState.SENDING.value,
                lease_owner=worker,
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                attempts=Digest.attempts + 1,
            )
        )
    return ids


def renew_leases(
    session: Session, digest_ids: Sequence[int], *, worker: str, now: datetime, lease_seconds: int
) -> tuple[set[int], set[int]]:
    """Extend *worker*'s lease on those of *digest_ids* it still holds (``sending``, its
    name on them, expired or not: nobody took them).  Returns the ids still held, and
    those another worker holds now (it reclaimed them after the lease ran out: they must
    not be sent by *worker*); the others were recorded meanwhile."""
    held: set[int] = set()
    taken: set[int] = set()
    table = Digest.__table__
    for part in chunks(sorted(set(digest_ids))):
        renewed = session.execute(
            update(table)
            .where(
                table.c.id.in_(part),
                table.c.lease_owner == worker,
                table.c.state == DigestState.SENDING.value,
            )
            .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
            .returning(table.c.id)
        )
        kept = {int(digest_id) for digest_id in renewed.scalars()}
        held |= kept
        others = [digest_id for digest_id in part if digest_id not in kept]
        if others:
            taken.update(
                session.scalars(
                    select(Digest.id).where(
                        Digest.id.in_(others),
                        Digest.state == DigestState.SENDING.value,
                        Digest.lease_owner != worker,
                    )
                )
            )
    return held, taken


@dataclass(frozen=True, slots=True)
class DigestRow:
    id: int
    subscriber_id: int
    subscriber_email: str
    local_date: date
    kind: DigestKind
    state: DigestState
    attempts: int
    entry_count: int
    message_id: str
    smtp_code: int | None
    last_error: str | None
    planned_at: datetime
    sent_at: datetime | None
    resend_of: int | None
    lease_owner: str | None
    subscriber_timezone: str = "UTC"
    subscriber_send_hour: int = 0
    nothing_at: datetime | None = None  # a scheduled day first found empty, then
    arrived: str | None = None  # the source that brought its newest entry (list_digests)


def _with_subscriber() -> Any:
    return select(Digest, SubscriberRow.email, SubscriberRow.timezone, SubscriberRow.send_hour).join(
        SubscriberRow, SubscriberRow.id == Digest.subscriber_id
    )


def _row(d: Digest, email: str, timezone: str = "UTC", send_hour: int = 0) -> DigestRow:
    return DigestRow(
        id=d.id,
        subscriber_id=d.subscriber_id,
        subscriber_email=email,
        subscriber_timezone=stored_zone(timezone),
        subscriber_send_hour=stored_hour(send_hour),
        nothing_at=d.nothing_at,
        local_date=d.local_date,
        kind=DigestKind(d.kind),
        state=DigestState(d.state),
        attempts=d.attempts,
        entry_count=d.entry_count,
        message_id=d.message_id,
        smtp_code=d.smtp_code,
        last_error=d.last_error,
        planned_at=d.planned_at,
        sent_at=d.sent_at,
        resend_of=d.resend_of_id,
        lease_owner=d.lease_owner,
    )


def get_digest(session: Session, digest_id: int) -> DigestRow | None:
    found = session.execute(_with_subscriber().where(Digest.id == digest_id)).first()
    return _row(*found) if found else None


def get_digests(session: Session, digest_ids: Sequence[int]) -> list[DigestRow]:
    """The digests that exist among *digest_ids*, in that order."""
    found: dict[int, DigestRow] = {}
    for part in chunks(list(digest_ids)):
        found.update((row[0].id, _row(*row)) for row in session.execute(_with_subscriber().where(Digest.id.in_(part))))
    return [found[i] for i in digest_ids if i in found]


def list_digests(
    session: Session,
    *,
    subscriber_id: int | None = None,
    state: DigestState | None = None,
    local_date: date | None = None,
    kind: DigestKind | None = None,
    limit: int | None = None,
) -> list[DigestRow]:
    query = _with_subscriber()
    if subscriber_id is not None:
        query = query.where(Digest.subscriber_id == subscriber_id)
    if state is not None:
        query = query.where(Digest.state == state.value)
    if local_date is not None:
        query = query.where(Digest.local_date == local_date)
    if kind is not None:
        query = query.where(Digest.kind == kind.value)
    query = query.order_by(Digest.id.desc())
    if limit is not None:
        query = query.limit(limit)
    rows = [_row(*row) for row in session.execute(query)]
    filled = [r.id for r in rows if r.nothing_at is not None and r.state is not DigestState.EMPTY]
    arrived = _arrivals(session, filled) if filled else {}
    return [replace(r, arrived=arrived[r.id]) if r.id in arrived else r for r in rows]


def _arrivals(session: Session, digest_ids: Sequence[int]) -> dict[int, str]:
    """Per digest, the source that first brought the newest of its entries (a file by its
    name, a feed by its URL)."""
    newest: dict[int, tuple[datetime, str]] = {}
    for part in chunks(list(digest_ids)):
        rows = session.execute(
            select(Digest.id, Entry.first_seen_at, Source.path, Source.origin)
            .join(BodyItem, BodyItem.body_key == Digest.body_key)
            .join(Entry, Entry.id == BodyItem.entry_id)
            .join(Source, Source.id == Entry.first_seen_source_id)
            .where(Digest.id.in_(part))
        )
        for digest_id, seen_at, path, origin in rows:
            if digest_id not in newest or seen_at > newest[digest_id][0]:
                newest[digest_id] = (seen_at, PurePath(path).name if origin == "file" else path)
    return {digest_id: path for digest_id, (_, path) in newest.items()}


@dataclass(frozen=True, slots=True)
class Finished:
    """One attempt's outcome, for ``finish_many``."""

    digest_id: int
    state: DigestState
    code: int | None
    error: str | None
    retry_at: datetime | None = None


_FINISH = (
    update(Digest.__table__)
    .where(
        Digest.__table__.c.id == bindparam("digest_id"),
        Digest.__table__.c.lease_owner == bindparam("worker"),
        Digest.__table__.c.state == DigestState.SENDING.value,
    )
    .values(
        state=bindparam("state"),
        smtp_code=bindparam("code"),
        last_error=bindparam("error"),
        lease_owner=None,
        lease_expires_at=None,
        sent_at=func.coalesce(bindparam("sent_at", type_=UTCDateTime()), Digest.__table__.c.sent_at),
        next_attempt_at=func.coalesce(bindparam("retry_at", type_=UTCDateTime()), Digest.__table__.c.next_attempt_at),
    )
)


def finish_many(session: Session, outcomes: Sequence[Finished], *, worker: str, now: datetime) -> set[int]:
    """Record outcomes of digests *worker* still holds the lease on (one statement,
    executed for many rows); the ids recorded.  The others were reclaimed by
    someone after the lease ran out and are left to them."""
    if not outcomes:
        return set()
    query = select(Digest.id).where(
        Digest.id.in_([o.digest_id for o in outcomes]),
        Digest.lease_owner == worker,
        Digest.state == DigestState.SENDING.value,
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    held = set(session.scalars(query))
    rows = [
        {
            "digest_id": o.digest_id,
            "worker": worker,
            "state": o.state.value,
            "code": o.code,
            "error": o.error,
            "sent_at": now if o.state is DigestState.SENT else None,
            "retry_at": o.retry_at,
        }
        for o in outcomes
        if o.digest_id in held
    ]
    if rows:
        session.execute(_FINISH, rows)
    return held


def count_bounce(session: Session, subscriber_id: int, *, threshold: int, now: datetime) -> bool:
    """Count one bounce; mark the subscriber ``bounced`` at *threshold*.  True if it was."""
    row = session.get_one(SubscriberRow, subscriber_id)
    row.bounces += 1
    if row.bounces >= threshold and row.status == "active":
        row.status = "bounced"
        row.updated_at = now
        return True
    return False


def reset_bounces(session: Session, subscriber_ids: Iterable[int]) -> None:
    """A delivery succeeded: their count of bounces starts again."""
    for part in chunks(sorted(set(subscriber_ids))):
        session.execute(
            update(SubscriberRow.__table__)
            .where(SubscriberRow.__table__.c.id.in_(part), SubscriberRow.__table__.c.bounces != 0)
            .values(bounces=0)
        )


# A resend that went out, or may still go out: its original needs no other.
RESEND_DELIVERED = (DigestState.SENT.value,)


RESEND_PENDING = (DigestState.QUEUED.value, DigestState.SENDING.value, DigestState.RETRY_WAIT.value)


def _resends_of(original: Any, states: Sequence[str]) -> Any:
    resend = aliased(Digest)
    return exists().where(
        resend.resend_of_id == original.id, resend.kind == DigestKind.RESEND.value, resend.state.in_(states)
    )


def failed_without_resend(session: Session) -> list[int]:
    """Failed digests (resends aside) that no resend has delivered or is delivering."""
    return list(
        session.scalars(
            select(Digest.id)
            .where(
                Digest.state == DigestState.FAILED.value,
                Digest.kind != DigestKind.RESEND.value,
                ~_resends_of(Digest, RESEND_DELIVERED + RESEND_PENDING),
            )
            .order_by(Digest.id)
        )
    )


def pending_resend_of(session: Session, digest_id: int) -> int | None:
    """A resend of *digest_id* that is still on its way, if there is one."""
    return session.scalar(
        select(Digest.id)
        .where(
            Digest.resend_of_id == digest_id, Digest.kind == DigestKind.RESEND.value, Digest.state.in_(RESEND_PENDING)
        )
        .limit(1)
    )


def lock_digest(session: Session, digest_id: int) -> None:
    """Hold *digest_id*'s row until the transaction ends (PostgreSQL; SQLite writes one at a time)."""
    session.execute(select(Digest.id).where(Digest.id == digest_id).with_for_update())


def stats_by_day(session: Session) -> list[tuple[date, dict[str, int]]]:
    """Digests per local day and state, each counted once by its outcome: a failed
    digest whose resend was delivered counts as sent, one whose resend is on its way
    as pending (``retry_wait``); resends themselves are counted apart, as ``resent``."""
    state = case(
        (and_(Digest.state == DigestState.FAILED.value, _resends_of(Digest, RESEND_DELIVERED)), DigestState.SENT.value),
        (
            and_(Digest.state == DigestState.FAILED.value, _resends_of(Digest, RESEND_PENDING)),
            DigestState.RETRY_WAIT.value,
        ),
        else_=Digest.state,
    )
    kind = case((Digest.kind == DigestKind.RESEND.value, "resent"), else_=state)
    rows = session.execute(
        select(Digest.local_date, kind, func.count())
        .where(or_(Digest.kind != DigestKind.RESEND.value, Digest.state == DigestState.SENT.value))
        .group_by(Digest.local_date, kind)
    )
    days: dict[date, dict[str, int]] = {}
    for day, outcome, count in rows:
        days.setdefault(day, {})[outcome] = count
    return sorted(days.items(), reverse=True)


def bounced_by_day(session: Session) -> dict[date, int]:
    rows = session.execute(
        select(Digest.local_date, func.count())
        .join(SubscriberRow, SubscriberRow.id == Digest.subscriber_id)
        .where(SubscriberRow.status == "bounced", Digest.state == DigestState.FAILED.value)
        .group_by(Digest.local_date)
    )
    return {day: count for day, count in rows}
