"""Plan stage: where each subscriber's window of entries starts, what of it they
already got, and where the next one may start.

Bounds the planner's reading: a window never grows with the history (watermarks,
``digest.max_age_days``).  Never chooses entries, never writes.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

from sqlalchemy.orm import Session

from bot.choose.candidates import effective_start
from bot.choose.filters import uses_liked
from bot.choose.select import SelectionCache
from bot.domain import EntryView, Subscriber
from bot.store.claims import claimed_from
from bot.store.subscribers import watermarks

# Entries first seen this long before a watermark are weighed again: an ingest
# that began before a planning pass but committed after it is not skipped.
WATERMARK_MARGIN = timedelta(hours=1)


def window_starts(
    session: Session, due: list[tuple[Subscriber, date]], keys: dict[int, str], oldest: datetime, kept: datetime
) -> tuple[dict[int, datetime], dict[int, tuple[datetime, str]]]:
    """Where each subscriber's window starts: their watermark less a margin when it is
    valid for their filter and the rules.  Without one, a subscriber planned before
    (their filter or the rules changed since, or their filter names ``liked``, whose
    verdicts change with their model) reads back to *oldest* (``digest.max_age_days``),
    and a subscriber never planned reads their whole backfill window: the window never
    grows with the history.  No window starts before *kept* (``plan.retention``): what
    the ledger no longer remembers is never offered again.  Also each subscriber's
    watermark as stored (those that have one)."""
    known = watermarks(session, [s.id for s, _ in due])
    starts: dict[int, datetime] = {}
    for subscriber, _ in due:
        mark = known.get(subscriber.id)
        valid = mark and mark[1] == keys[subscriber.id] and not uses_liked(subscriber.filter)
        start = mark[0] - WATERMARK_MARGIN if mark and valid else oldest if mark else kept
        starts[subscriber.id] = max(start, kept)
    return starts, known


def watermark(oldest_left: datetime | None, now: datetime, oldest: datetime) -> datetime:
    """Where the next window may start: now when nothing is left over; else at the
    oldest entry left over, first seen at *oldest_left* (everything first seen before
    it was claimed or did not match), but never before *oldest*: left-overs roll over
    for ``digest.max_age_days`` at most, so a reader who always gets more than a digest
    holds does not make every day's planning read all their history."""
    if oldest_left is None:
        return now
    return max(oldest, oldest_left)


def claimed_in_windows(
    session: Session,
    due: list[tuple[Subscriber, date]],
    starts: dict[int, datetime],
    cache: SelectionCache,
    now: datetime,
) -> dict[int, set[int]]:
    """The entries of each subscriber's window that the ledger says they already got.

    The ledger is read per window: the batch's claims on the window's entries
    (subscribers whose windows start together share the read)."""
    by_window: dict[datetime | None, tuple[list[EntryView], list[int]]] = {}
    for subscriber, _ in due:
        start = effective_start(subscriber, starts[subscriber.id])
        window = cache.entries(session, start, now)
        if window:
            by_window.setdefault(start, (window, []))[1].append(subscriber.id)
    claimed: dict[int, set[int]] = {}
    for window, ids in by_window.values():
        claimed.update(claimed_from(session, ids, [entry.id for entry in window]))
    return claimed
