"""Revised entries (arXiv ``replace``) that subscribers received before: which to tell
whom, pinned in the digest that tells them and marked told in the ledger.  SQL only.

Every query here starts from what it is about, by construction: the few entries revised
within ``HORIZON`` (an index on ``revised_at``), then the ledger rows of those entries
and of the subscribers being planned (the ledger's key, entry first), then those rows'
digests and subscribers by their keys, then the told entries' links from those digests'
bodies.  None can begin from every digest ever sent, which once made planning
quadratic in subscribers and grow with the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import and_, bindparam, select, update
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.store.bulk import chunks
from bot.store.schema import BodyItem, Digest, Entry, LedgerEntry
from bot.store.schema import Subscriber as SubscriberRow

# Revisions older than this are not told any more (a subscriber away a month).
HORIZON = timedelta(days=30)
# At most this many in one digest; the rest wait for the next.
PER_DIGEST = 10
# Ledger rows looked up at once: (revised entries) x (subscribers) key pairs.
_PAIRS = 20_000


def attach_revisions(session: Session, digests: Sequence[tuple[int, int]], now: datetime) -> None:
    """For each (digest id, subscriber id) of digests just planned: the entries that
    subscriber was sent earlier and that were revised since (and not yet told them),
    written into the digest (``digests.updates``) and marked told (``ledger.reported_at``)."""
    digest_of = {subscriber_id: digest_id for digest_id, subscriber_id in digests}
    if not digest_of:
        return
    query = select(Entry.id, Entry.revised_at, Entry.title, Entry.revision_note).where(Entry.revised_at > now - HORIZON)
    revised = {
        entry_id: (revised_at, title, note)
        for entry_id, revised_at, title, note in session.execute(query)
        if revised_at is not None
    }
    if not revised:
        return  # the common case: one indexed look-up, whatever the history
    told = _to_tell(session, revised, sorted(digest_of))
    if not told:
        return
    urls = _shown_urls(session, sorted({digest_id for items in told.values() for _, _, digest_id in items}))
    shown = {
        sid: [
            {
                "title": revised[entry_id][1],
                "note": revised[entry_id][2] or "revised",
                "url": urls.get((did, entry_id), ""),
            }
            for _, entry_id, did in items
        ]
        for sid, items in told.items()
    }
    session.connection().execute(
        update(Digest.__table__).where(Digest.__table__.c.id == bindparam("did")).values(updates=bindparam("shown")),
        [{"did": digest_of[sid], "shown": items} for sid, items in shown.items()],
    )
    ledger = LedgerEntry.__table__
    session.connection().execute(
        update(ledger)
        .where(and_(ledger.c.subscriber_id == bindparam("sid"), ledger.c.entry_id == bindparam("eid")))
        .values(reported_at=now),
        [{"sid": sid, "eid": entry_id} for sid, items in told.items() for _, entry_id, _ in items],
    )


def _to_tell(
    session: Session, revised: dict[int, tuple[datetime, str, str | None]], subscriber_ids: list[int]
) -> dict[int, list[tuple[datetime, int, int]]]:
    """Per subscriber who wants them, the revised entries a sent digest of theirs
    carried and that changed since it (or since they were last told): (revised at,
    entry, the digest that carried it), oldest first, at most ``PER_DIGEST``."""
    candidates = _received(session, sorted(revised), _wanting_updates(session, subscriber_ids))
    sent = _sent_digests(session, sorted({digest_id for _, _, digest_id, _ in candidates}))
    found: dict[int, list[tuple[datetime, int, int]]] = {}
    for subscriber_id, entry_id, digest_id, reported_at in candidates:
        planned_at = sent.get(digest_id)
        revised_at = revised[entry_id][0]
        if planned_at is not None and revised_at > (reported_at or planned_at):
            found.setdefault(subscriber_id, []).append((revised_at, entry_id, digest_id))
    return {sid: sorted(items)[:PER_DIGEST] for sid, items in found.items()}


def _shown_urls(session: Session, digest_ids: list[int]) -> dict[tuple[int, int], str]:
    """(digest, entry) -> where that digest linked the entry (its body's items)."""
    found: dict[tuple[int, int], str] = {}
    for part in chunks(digest_ids):
        query = (
            select(Digest.id, BodyItem.entry_id, BodyItem.url)
            .join(BodyItem, BodyItem.body_key == Digest.body_key)
            .where(Digest.id.in_(part))
        )
        found.update(((digest_id, entry_id), url) for digest_id, entry_id, url in session.execute(query))
    return found


def _wanting_updates(session: Session, subscriber_ids: list[int]) -> list[int]:
    """Those of the subscribers who want revised entries listed (by primary key)."""
    found: list[int] = []
    for part in chunks(subscriber_ids):
        found += session.scalars(
            select(SubscriberRow.id).where(SubscriberRow.id.in_(part), SubscriberRow.send_updates.is_(True))
        )
    return sorted(found)


def _received(
    session: Session, entry_ids: list[int], subscriber_ids: list[int]
) -> list[tuple[int, int, int, datetime | None]]:
    """(subscriber, entry, digest, reported_at) of the ledger rows of these entries
    and subscribers: key look-ups on the ledger's (entry, subscriber) key."""
    rows: list[tuple[int, int, int, datetime | None]] = []
    if not subscriber_ids:
        return rows
    per_part = max(1, _PAIRS // len(entry_ids))
    for people in chunks(subscriber_ids, min(per_part, 900)):
        for entries in chunks(entry_ids, max(1, _PAIRS // len(people))):
            query = select(
                LedgerEntry.subscriber_id, LedgerEntry.entry_id, LedgerEntry.digest_id, LedgerEntry.reported_at
            ).where(LedgerEntry.entry_id.in_(entries), LedgerEntry.subscriber_id.in_(people))
            rows += [tuple(row) for row in session.execute(query)]  # type: ignore[misc]
    return rows


def _sent_digests(session: Session, digest_ids: list[int]) -> dict[int, datetime]:
    """When each of these digests was planned, for those that were sent (by primary key)."""
    found: dict[int, datetime] = {}
    for part in chunks(digest_ids):
        query = select(Digest.id, Digest.planned_at).where(Digest.id.in_(part), Digest.state == DigestState.SENT.value)
        found.update((digest_id, planned_at) for digest_id, planned_at in session.execute(query))
    return found
