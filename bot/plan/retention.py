"""Plan stage: what ``database.keep_days`` removes, and the floor that makes it safe.

The rule that nothing is sent twice: a digest planned before ``kept_since`` carried
entries first seen before it, and no window the planner reads (nor a preview) starts
before ``kept_since`` (``bot.plan.windows``), so the claims removed with the
digest (its body) name entries that are never weighed again.  Entries themselves are kept: they
are how a paper seen again is known, and they do not grow with the subscribers.

Removes in small transactions with a pause between them, so the daemon's other
writers (planning, delivery, unsubscribes) never wait long for SQLite's one writer.
Never removes a digest that is not settled or whose resend is still on its way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.store.engine import transaction
from bot.store.rankings import forget_rankings
from bot.store.retention import (
    expired_digests,
    note_removed,
    remove_appearances,
    remove_digests,
    remove_notices,
    sources_with_unread_appearances,
)

BATCH = 500  # digests a transaction (and their bodies): tens of milliseconds on SQLite
PAUSE_SECONDS = 0.05  # between two transactions, for the writers waiting for the lock


@dataclass(frozen=True, slots=True)
class RetentionReport:
    before: datetime  # digests planned before this were removed
    digests: int
    appearances: int
    finished: bool  # False: stopped before everything due was removed


def kept_since(settings: Settings, now: datetime) -> datetime:
    """The oldest first-seen time any window may reach: what retention keeps."""
    return now - timedelta(days=settings.database.keep_days)


def remove_expired(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    now: datetime,
    stopped: Callable[[], bool] = lambda: False,
    batch: int = BATCH,
    pause: float = PAUSE_SECONDS,
) -> RetentionReport:
    """Remove the settled digests planned before ``kept_since`` (with the bodies no
    kept digest shows, and the revision notices told before it) and the appearances
    of sources ingested before it that nothing reads, a small transaction at a time; and
    the standing rankings of filters no pass has used for a span."""
    before = kept_since(settings, now)
    digests = appearances = 0
    while not stopped():
        with transaction(factory) as session:
            found = expired_digests(session, before, batch)
            if found:
                remove_digests(session, found)
                note_removed(session, before, len(found), now)
        digests += len(found)
        if len(found) < batch:
            break
        time.sleep(pause)
    with transaction(factory) as session:
        remove_notices(session, before)
        # A ranking no pass has brought up to date for a span is a filter no reader has now.
        forget_rankings(session, older_than=now - timedelta(days=settings.digest.max_age_days + 2))
    with factory() as session:
        sources = sources_with_unread_appearances(session, before)
    for source_id in sources:
        if stopped():
            break
        with transaction(factory) as session:
            appearances += remove_appearances(session, source_id)
        time.sleep(pause)
    return RetentionReport(before, digests, appearances, finished=not stopped())
