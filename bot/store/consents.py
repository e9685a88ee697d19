"""Consent rows, the sign-up mail stamp and the hourly counts of requests (sign-ups per
client, library uploads per reader): SQL only."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from bot.domain import ConsentEvent, SubscriberStatus
from bot.store.bulk import bulk_insert, chunks
from bot.store.response_tables import Consent, SignupRequest
from bot.store.row_shapes import RowShape
from bot.store.schema import SubscriberRow
from bot.store.subscribers import email_key


def record_consent(session: Session, subscriber_id: int, event: ConsentEvent) -> None:
    session.execute(
        insert(Consent).values(
            subscriber_id=subscriber_id,
            event=event.event,
            at=event.at,
            address=event.address,
            page=event.page[:500],
            client=event.client[:64],
            detail=event.detail,
        )
    )


CONSENT = RowShape(ConsentEvent)


def consents_of(session: Session, subscriber_id: int) -> list[ConsentEvent]:
    rows = session.scalars(select(Consent).where(Consent.subscriber_id == subscriber_id).order_by(Consent.id))
    return [CONSENT.of(r) for r in rows]


def mailed_at(session: Session, subscriber_id: int) -> datetime | None:
    return session.scalar(select(SubscriberRow.mailed_at).where(SubscriberRow.id == subscriber_id))


def set_mailed_at(session: Session, subscriber_id: int, at: datetime | None) -> None:
    session.execute(update(SubscriberRow).where(SubscriberRow.id == subscriber_id).values(mailed_at=at))


def count_request(session: Session, client: str, now: datetime, *, since: datetime) -> int:
    """Record one request at *now* counted under *client* (a client's address for a
    sign-up, ``library:<id>`` for a reader's upload); how many it made since *since*, this
    one included.  Every client's rows from before *since* are deleted on the way (the
    callers share one window)."""
    session.execute(delete(SignupRequest).where(SignupRequest.at < since))
    session.execute(insert(SignupRequest).values(client=client[:64], at=now))
    query = select(func.count()).where(SignupRequest.client == client[:64], SignupRequest.at >= since)
    return int(session.scalar(query) or 0)


def delete_unconfirmed(session: Session, mailed_before: datetime) -> int:
    """Delete pending subscribers whose last confirmation mail went out before
    *mailed_before* (its link has expired); how many."""
    result = session.execute(
        delete(SubscriberRow).where(
            SubscriberRow.status == SubscriberStatus.PENDING.value,
            func.coalesce(SubscriberRow.mailed_at, SubscriberRow.created_at) < mailed_before,
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)


def record_operator_adds(session: Session, emails: Iterable[str], at: datetime, detail: str) -> None:
    """An ``operator`` consent event for each of these subscribers' addresses."""
    keys = [email_key(e) for e in emails]
    rows: list[dict[str, object]] = []
    for part in chunks(keys):
        query = select(SubscriberRow.id, SubscriberRow.email).where(SubscriberRow.email_key.in_(part))
        rows += [
            {
                "subscriber_id": i,
                "event": "operator",
                "at": at,
                "address": e,
                "page": "",
                "client": "",
                "detail": detail,
            }
            for i, e in session.execute(query)
        ]
    bulk_insert(session, Consent.__table__, rows)


def known_addresses(session: Session, emails: Iterable[str]) -> set[str]:
    """The address keys of *emails* that have a subscriber row."""
    keys = [email_key(e) for e in emails]
    found: set[str] = set()
    for part in chunks(keys):
        found.update(session.scalars(select(SubscriberRow.email_key).where(SubscriberRow.email_key.in_(part))))
    return found


def consents_by_day(session: Session, event: str, since: datetime) -> dict[date, int]:
    """How many *event* consents (``unsubscribe``, by every route) were recorded each UTC
    day from *since* on."""
    days: dict[date, int] = {}
    for (at,) in session.execute(select(Consent.at).where(Consent.event == event, Consent.at >= since)):
        days[at.date()] = days.get(at.date(), 0) + 1
    return days
