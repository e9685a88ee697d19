"""Store: each attempt's answer recorded, for the claim it answers (``queue`` made the
claim), and the bounce count it moves.  A claim's outcome is recorded while it is
``sending`` or ``unknown`` (settled while its worker was paused or could not write: the
answer it then got is the truth), by the worker that holds it.  SQL only; the retry and
bounce rules live in ``bot.delivery``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.domain.statuses import after_bounces
from bot.domain.stored import stored_status
from bot.store.base import UTCDateTime
from bot.store.bulk import chunks
from bot.store.queue import claimed
from bot.store.schema import Digest, SubscriberRow


@dataclass(frozen=True, slots=True)
class Finished:
    """One attempt's outcome, for ``finish_many``: *attempt* is the claim it answers."""

    digest_id: int
    attempt: int
    state: DigestState
    code: int | None
    error: str | None
    retry_at: datetime | None = None


_RECORDABLE = (DigestState.SENDING.value, DigestState.UNKNOWN.value)
_FINISH = (
    update(Digest.__table__)
    .where(
        Digest.__table__.c.id == bindparam("digest_id"),
        Digest.__table__.c.attempts == bindparam("attempt"),
        Digest.__table__.c.lease_owner == bindparam("worker"),
        # Spelt out: an IN list is expanded per call, which executemany cannot take.
        or_(*(Digest.__table__.c.state == state for state in _RECORDABLE)),
    )
    .values(
        state=bindparam("state"),
        smtp_code=bindparam("code"),
        last_error=bindparam("error"),
        lease_owner=bindparam("owner"),
        lease_expires_at=None,
        sent_at=func.coalesce(bindparam("sent_at", type_=UTCDateTime()), Digest.__table__.c.sent_at),
        next_attempt_at=func.coalesce(bindparam("retry_at", type_=UTCDateTime()), Digest.__table__.c.next_attempt_at),
    )
)


def finish_many(session: Session, outcomes: Sequence[Finished], *, worker: str, now: datetime) -> set[int]:
    """Record outcomes of the claims *worker* still holds (one statement, executed for
    many rows); the ids recorded.  The others were reclaimed by someone after the lease
    ran out and are left to them.  An unknown outcome keeps the worker's name on the
    row, so that a late answer it still gets is recorded too."""
    if not outcomes:
        return set()
    query = select(Digest.id).where(
        claimed([(o.digest_id, o.attempt) for o in outcomes]),
        Digest.lease_owner == worker,
        Digest.state.in_(_RECORDABLE),
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    held = set(session.scalars(query))
    rows = [
        {
            "digest_id": o.digest_id,
            "attempt": o.attempt,
            "worker": worker,
            "owner": worker if o.state is DigestState.UNKNOWN else None,
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
    """Count one bounce; the subscriber becomes what ``after_bounces`` says of their count
    against *threshold*.  True if they became bounced."""
    row = session.get_one(SubscriberRow, subscriber_id)
    row.bounces += 1
    after = after_bounces(stored_status(row.status), row.bounces, threshold)
    if after is None:
        return False
    row.status = after.value
    row.updated_at = now
    return True


def reset_bounces(session: Session, subscriber_ids: Iterable[int]) -> None:
    """A delivery succeeded: their count of bounces starts again."""
    for part in chunks(sorted(set(subscriber_ids))):
        session.execute(
            update(SubscriberRow.__table__)
            .where(SubscriberRow.__table__.c.id.in_(part), SubscriberRow.__table__.c.bounces != 0)
            .values(bounces=0)
        )
