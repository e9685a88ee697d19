"""Plan stage: which revised entries (arXiv ``replace``) a digest being planned tells its
subscriber about: those a sent digest of theirs carried and that changed since (or since
they were last told), recent ones only, a few per digest.  ``to_tell`` is the rule, pure;
``revision_updates`` asks the store (``bot.store.revisions``) for what to tell, and
``bot.plan.news`` writes it with the library's news.  Never renders or sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from bot.store.revisions import revised_since, sent_copies, shown_urls

# Revisions older than this are not told any more (a subscriber away a month).
HORIZON = timedelta(days=30)
# At most this many in one digest; the rest wait for the next.
PER_DIGEST = 10


def to_tell(
    copies: Iterable[tuple[int, int, int, datetime | None, datetime | None]], revised: dict[int, datetime]
) -> dict[int, list[tuple[datetime, int, int]]]:
    """Per subscriber, the revised entries to tell them: of *copies* (subscriber, entry, the
    digest that carried it, when they were last told of it, when that digest was planned:
    None unless it was sent), those revised (*revised*: entry -> when) after the later of
    the last two; (revised at, entry, digest), oldest first, at most ``PER_DIGEST``."""
    found: dict[int, list[tuple[datetime, int, int]]] = {}
    for subscriber_id, entry_id, digest_id, told_at, planned_at in copies:
        revised_at = revised[entry_id]
        if planned_at is not None and revised_at > (told_at or planned_at):
            found.setdefault(subscriber_id, []).append((revised_at, entry_id, digest_id))
    return {sid: sorted(items)[:PER_DIGEST] for sid, items in found.items()}


def revision_updates(
    session: Session, digest_of: Mapping[int, int], now: datetime
) -> tuple[dict[int, list[dict[str, Any]]], list[tuple[int, int]]]:
    """For the digests just planned (*digest_of*: subscriber id -> digest id): the
    entries each subscriber was sent earlier and that were revised since (and not yet
    told them), per digest; and the (subscriber, entry) pairs that tells."""
    if not digest_of:
        return {}, []
    revised = revised_since(session, now - HORIZON)
    if not revised:
        return {}, []  # the common case: one indexed look-up, whatever the history
    told = to_tell(sent_copies(session, list(revised), list(digest_of)), {e: r[0] for e, r in revised.items()})
    if not told:
        return {}, []
    urls = shown_urls(session, (digest_id for items in told.values() for _, _, digest_id in items))
    updates = {
        digest_of[sid]: [
            {
                "title": revised[entry_id][1],
                "note": revised[entry_id][2] or "revised",
                "url": urls.get((did, entry_id), ""),
            }
            for _, entry_id, did in items
        ]
        for sid, items in told.items()
    }
    return updates, [(sid, entry_id) for sid, items in told.items() for _, entry_id, _ in items]
