"""Store: the channels and the parts of their digests.  A channel's due digests claimed
under a lease as mail is (``bot.store.queue``'s claim, found through the channels
table), each part's state written before and after its request, and a part caught on
the wire by a stop settled as unknown.  SQL only; what a service's answer means lives in
``bot.channels``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.domain.channel_states import PartState
from bot.store.bulk import insert_ignoring_conflicts
from bot.store.channel_tables import ChannelPartRow, ChannelRow
from bot.store.queue import Claim, lease_clock, lease_digests
from bot.store.schema import Digest
from bot.store.subscribers import purge_subscriber


def channel_named(session: Session, name: str) -> ChannelRow | None:
    return session.scalars(select(ChannelRow).where(ChannelRow.name == name)).first()


def channels_by_subscriber(session: Session, subscriber_ids: Sequence[int]) -> dict[int, ChannelRow]:
    rows = session.scalars(select(ChannelRow).where(ChannelRow.subscriber_id.in_(list(subscriber_ids))))
    return {row.subscriber_id: row for row in rows}


def all_channels(session: Session) -> list[ChannelRow]:
    return list(session.scalars(select(ChannelRow).order_by(ChannelRow.name)))


def any_channel(session: Session) -> bool:
    return session.scalar(select(ChannelRow.subscriber_id).limit(1)) is not None


def add_channel(session: Session, row: ChannelRow) -> None:
    session.add(row)
    session.flush()


def change_channel(session: Session, subscriber_id: int, **values: object) -> None:
    session.execute(update(ChannelRow).where(ChannelRow.subscriber_id == subscriber_id).values(**values))


def remove_channel(session: Session, subscriber_id: int) -> None:
    """The channel and its subscriber row, with its digests and their parts (as a
    reader's purge removes theirs)."""
    purge_subscriber(session, subscriber_id)


def claim_channel_digests(
    session: Session, *, now: datetime, worker: str, lease_seconds: int, limit: int
) -> list[Claim]:
    """Take up to *limit* due digests of channels not held by their service's 429, oldest
    first, and lease them to *worker* (as ``queue.claim_due`` does the mail's)."""
    at = lease_clock(session, now)
    waiting = (DigestState.QUEUED.value, DigestState.RETRY_WAIT.value)
    due = or_(
        and_(Digest.state.in_(waiting), Digest.next_attempt_at <= now),
        and_(Digest.state == DigestState.SENDING.value, Digest.lease_expires_at < at(0), Digest.wire_at.is_(None)),
    )
    query = (
        select(Digest.id)
        .join(ChannelRow, ChannelRow.subscriber_id == Digest.subscriber_id)
        .where(due, or_(ChannelRow.held_until.is_(None), ChannelRow.held_until <= now))
        .order_by(Digest.next_attempt_at, Digest.id)
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True, of=Digest)
    return lease_digests(session, list(session.scalars(query)), worker, at(lease_seconds))


def parts_of(session: Session, digest_id: int) -> list[ChannelPartRow]:
    query = select(ChannelPartRow).where(ChannelPartRow.digest_id == digest_id).order_by(ChannelPartRow.number)
    return list(session.scalars(query))


def put_parts(session: Session, digest_id: int, parts: Sequence[tuple[int, int, str]], now: datetime) -> None:
    """(number, total, transaction id) of each part, pending; a part already there stays."""
    rows = [
        {
            "digest_id": digest_id,
            "number": number,
            "total": total,
            "state": PartState.PENDING.value,
            "transaction_id": txn,
            "tries": 0,
            "updated_at": now,
        }
        for number, total, txn in parts
    ]
    insert_ignoring_conflicts(session, ChannelPartRow.__table__, rows)


def change_part(session: Session, digest_id: int, number: int, now: datetime, **values: object) -> None:
    session.execute(
        update(ChannelPartRow)
        .where(ChannelPartRow.digest_id == digest_id, ChannelPartRow.number == number)
        .values(updated_at=now, **values)
    )


def settle_parts(session: Session, now: datetime) -> int:
    """Parts left ``sending`` by a worker that stopped while their request was out, their
    digest no longer being sent: unknown (the service may have them)."""
    stale = (
        select(Digest.id)
        .where(Digest.id == ChannelPartRow.digest_id, Digest.state != DigestState.SENDING.value)
        .exists()
    )
    done = session.execute(
        update(ChannelPartRow)
        .where(ChannelPartRow.state == PartState.SENDING.value, stale)
        .values(state=PartState.UNKNOWN.value, detail="on the wire when its worker stopped", updated_at=now)
    )
    return int(getattr(done, "rowcount", 0) or 0)


def part_counts(session: Session) -> dict[str, int]:
    query = select(ChannelPartRow.state, func.count()).group_by(ChannelPartRow.state)
    return {str(state): int(n) for state, n in session.execute(query)}


def parts_of_digests(session: Session, digest_ids: Sequence[int]) -> dict[int, list[ChannelPartRow]]:
    found: dict[int, list[ChannelPartRow]] = {}
    query = select(ChannelPartRow).where(ChannelPartRow.digest_id.in_(list(digest_ids)))
    for row in session.scalars(query.order_by(ChannelPartRow.digest_id, ChannelPartRow.number)):
        found.setdefault(row.digest_id, []).append(row)
    return found


def off_the_wire(session: Session, claim: Claim, worker: str) -> None:
    """A part answered: nothing of the digest is on the wire (its claim still held)."""
    session.execute(
        update(Digest)
        .where(Digest.id == claim.digest_id, Digest.attempts == claim.attempt, Digest.lease_owner == worker)
        .values(wire_at=None)
    )


def retry_unknown_matrix(session: Session, now: datetime) -> int:
    """Matrix digests left unknown by a worker stopped mid-request: due again at once, their
    unanswered parts pending (each part's transaction id makes the homeserver take a
    repeated one as the event it already made).  How many."""
    matrix = select(ChannelRow.subscriber_id).where(ChannelRow.service == "matrix").scalar_subquery()
    again = session.execute(
        update(Digest)
        .where(Digest.state == DigestState.UNKNOWN.value, Digest.subscriber_id.in_(matrix))
        .values(
            state=DigestState.RETRY_WAIT.value,
            next_attempt_at=now,
            lease_owner=None,
            lease_expires_at=None,
            wire_at=None,
        )
        .returning(Digest.id)
    )
    ids = [int(digest_id) for digest_id in again.scalars()]
    if ids:
        session.execute(
            update(ChannelPartRow)
            .where(
                ChannelPartRow.digest_id.in_(ids),
                ChannelPartRow.state.in_((PartState.SENDING.value, PartState.UNKNOWN.value)),
            )
            .values(state=PartState.PENDING.value, updated_at=now)
        )
    return len(ids)
