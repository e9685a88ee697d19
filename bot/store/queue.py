"""Store: the delivery queue.  Due digests claimed under a lease (in due order, each
state's off its index), leases renewed while a batch is sent and expired when a worker
died, each attempt's outcome recorded while the lease is still held, and the bounce
count it moves.  SQL only; the retry and bounce rules live in ``bot.delivery``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, bindparam, func, select, update
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.store.base import UTCDateTime
from bot.store.bulk import chunks
from bot.store.schema import Digest
from bot.store.schema import Subscriber as SubscriberRow


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
