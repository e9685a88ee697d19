"""Returned-mail events (bounces, complaints, unsubscribe mails read from the inbox):
SQL only.  Which status an event leads to is ``bot.domain.statuses``'s to say."""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from bot.domain import ReturnEvent, ReturnKind
from bot.store.response_tables import ReturnEventRow as ReturnRow
from bot.store.row_shapes import RowShape
from bot.store.schema import Digest


def is_recorded(session: Session, message_key: str) -> bool:
    """Whether the message with this key was read and its outcome committed before."""
    return recorded_kind(session, message_key) is not None


def recorded_kind(session: Session, message_key: str) -> ReturnKind | None:
    """What the message with this key was found to be when it was read before (None: never)."""
    kind = session.scalar(select(ReturnRow.kind).where(ReturnRow.message_key == message_key).limit(1))
    return ReturnKind(kind) if kind is not None else None


def record_return(session: Session, message_key: str | None, subscriber_id: int | None, event: ReturnEvent) -> None:
    session.execute(
        insert(ReturnRow).values(
            message_key=message_key,
            at=event.at,
            subscriber_id=subscriber_id,
            digest_id=event.digest_id,
            kind=event.kind.value,
            address=event.address[:320],
            status=event.status[:16],
            diagnostic=event.diagnostic[:300],
        )
    )


def count_since_cleared(session: Session, subscriber_id: int, kind: ReturnKind, since: datetime | None = None) -> int:
    """The subscriber's events of *kind* after their last ``cleared`` one (and at or
    after *since*)."""
    cleared = session.scalar(
        select(func.max(ReturnRow.id)).where(
            ReturnRow.subscriber_id == subscriber_id, ReturnRow.kind == ReturnKind.CLEARED.value
        )
    )
    query = select(func.count()).where(
        ReturnRow.subscriber_id == subscriber_id, ReturnRow.kind == kind.value, ReturnRow.id > (cleared or 0)
    )
    if since is not None:
        query = query.where(ReturnRow.at >= since)
    return int(session.scalar(query) or 0)


RETURN = RowShape(ReturnEvent)


def returns_of(session: Session, subscriber_id: int, limit: int = 20) -> list[ReturnEvent]:
    """The subscriber's newest events, newest first."""
    rows = session.scalars(
        select(ReturnRow).where(ReturnRow.subscriber_id == subscriber_id).order_by(ReturnRow.id.desc()).limit(limit)
    )
    return [RETURN.of(r) for r in rows]


def returns_by_day(session: Session, since: datetime | None = None) -> dict[date, dict[str, int]]:
    """Events per UTC day and kind (subscribers not known to us included), from *since* on."""
    query = select(ReturnRow.at, ReturnRow.kind)
    if since is not None:
        query = query.where(ReturnRow.at >= since)
    days: dict[date, dict[str, int]] = {}
    for at, kind in session.execute(query):
        counts = days.setdefault(at.date(), {})
        counts[kind] = counts.get(kind, 0) + 1
    return days


def digest_subscriber(session: Session, digest_id: int) -> int | None:
    return session.scalar(select(Digest.subscriber_id).where(Digest.id == digest_id))


def record_cleared(session: Session, subscriber_id: int, at: datetime) -> None:
    """``subscribers resume`` cleared a bounce: earlier hard bounces no longer count."""
    record_return(session, None, subscriber_id, ReturnEvent(at, ReturnKind.CLEARED, "", "", "subscribers resume", None))
