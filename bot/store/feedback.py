"""Feedback ("more like this", "less like this") and a subscriber's taste threshold
(``bot.taste``): SQL only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date, datetime

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from bot.domain import RatedEntry
from bot.store.bulk import among, chunks
from bot.store.row_shapes import RowShape
from bot.store.schema import Entry, SubscriberRow
from bot.store.taste_tables import Feedback

VERDICTS = ("more", "less")


def entry_ids_of(session: Session, keys: Iterable[str]) -> dict[str, int]:
    """The stored entries' ids by key (a digest item names its entry by key)."""
    found: dict[str, int] = {}
    for part in chunks(sorted(set(keys))):
        found.update((key, i) for key, i in session.execute(select(Entry.key, Entry.id).where(Entry.key.in_(part))))
    return found


def set_feedback(
    session: Session, subscriber_id: int, entry_id: int, verdict: str, now: datetime, section: str = ""
) -> bool:
    """Record *verdict* on the entry, shown under the interest *section* (replacing an
    earlier one); False when it was already the verdict (nothing changes, so the model
    is not trained again)."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r}")
    held = session.scalar(
        select(Feedback.verdict).where(Feedback.subscriber_id == subscriber_id, Feedback.entry_id == entry_id)
    )
    if held == verdict:
        return False
    if held is not None:
        session.execute(
            update(Feedback)
            .where(Feedback.subscriber_id == subscriber_id, Feedback.entry_id == entry_id)
            .values(verdict=verdict, at=now, section=section)
        )
    else:
        session.execute(
            insert(Feedback).values(
                subscriber_id=subscriber_id, entry_id=entry_id, verdict=verdict, at=now, section=section
            )
        )
    return True


def remove_feedback(session: Session, subscriber_id: int, entry_id: int) -> bool:
    """Undo: False when there was none."""
    result = session.execute(
        delete(Feedback).where(Feedback.subscriber_id == subscriber_id, Feedback.entry_id == entry_id)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def verdicts_on(session: Session, subscriber_id: int, entry_ids: Iterable[int]) -> dict[int, str]:
    """The subscriber's verdict on each of these entries that has one."""
    found: dict[int, str] = {}
    for part in chunks(sorted(set(entry_ids))):
        query = select(Feedback.entry_id, Feedback.verdict).where(
            Feedback.subscriber_id == subscriber_id, Feedback.entry_id.in_(part)
        )
        found.update((entry_id, verdict) for entry_id, verdict in session.execute(query))
    return found


RATED = RowShape(RatedEntry)


def feedback_of(session: Session, subscriber_id: int) -> list[RatedEntry]:
    """All of the subscriber's feedback, oldest first."""
    query = (
        select(Feedback.entry_id, Entry.key, Entry.title, Feedback.verdict, Feedback.at, Feedback.section)
        .join(Entry, Entry.id == Feedback.entry_id)
        .where(Feedback.subscriber_id == subscriber_id)
        .order_by(Feedback.at, Feedback.entry_id)
    )
    return [RATED.of(row) for row in session.execute(query)]


def set_threshold(session: Session, subscriber_id: int, value: float, now: datetime) -> None:
    session.execute(
        update(SubscriberRow).where(SubscriberRow.id == subscriber_id).values(taste_threshold=value, updated_at=now)
    )


def ratings_by_day(session: Session, since: datetime) -> dict[date, dict[str, int]]:
    """Readers' ratings as they stand (an undone one is gone) per UTC day they were
    given from *since* on, by verdict."""
    days: dict[date, dict[str, int]] = {}
    for at, verdict in session.execute(select(Feedback.at, Feedback.verdict).where(Feedback.at >= since)):
        counts = days.setdefault(at.date(), {})
        counts[verdict] = counts.get(verdict, 0) + 1
    return days


def newest_feedback_of(session: Session, subscriber_ids: Sequence[int], most: int) -> dict[int, list[RatedEntry]]:
    """Each subscriber's newest *most* ratings, newest first; a subscriber without any
    is not in the result."""
    found: dict[int, list[RatedEntry]] = {}
    if most <= 0:
        return found
    for part in chunks(subscriber_ids):
        newest = (
            select(
                Feedback.subscriber_id,
                Feedback.entry_id,
                Feedback.verdict,
                Feedback.at,
                func.row_number()
                .over(partition_by=Feedback.subscriber_id, order_by=(Feedback.at.desc(), Feedback.entry_id.desc()))
                .label("rank"),
            )
            .where(among(session, Feedback.subscriber_id, part))
            .subquery()
        )
        query = (
            select(newest.c.subscriber_id, newest.c.entry_id, Entry.key, Entry.title, newest.c.verdict, newest.c.at)
            .join(Entry, Entry.id == newest.c.entry_id)
            .where(newest.c.rank <= most)
            .order_by(newest.c.rank)
        )
        for subscriber_id, *rated in session.execute(query):
            found.setdefault(subscriber_id, []).append(RatedEntry(*rated))
    return found
