"""Revised entries (arXiv ``replace``) that subscribers received before: the queries
``bot.plan.revisions`` decides from, and the writes that pin what it told whom in the
digest that tells them and mark it told in the ledger.  SQL only.

Every query here starts from what it is about, by construction: the few entries revised
since a moment (an index on ``revised_at``), then the ledger rows of those entries
and of the subscribers being planned (the ledger's key, entry first), then those rows'
digests and subscribers by their keys, then the told entries' links from those digests'
bodies.  None can begin from every digest ever sent, which once made planning
quadratic in subscribers and grow with the history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, select, update
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.store.bulk import chunks
from bot.store.schema import BodyItem, Digest, Entry, LedgerEntry
from bot.store.schema import Subscriber as SubscriberRow

# Ledger rows looked up at once: (revised entries) x (subscribers) key pairs.
_PAIRS = 20_000


def revised_since(session: Session, since: datetime) -> dict[int, tuple[datetime, str, str | None]]:
    """Entry id -> (revised at, title, revision note) of the entries revised after *since*."""
    query = select(Entry.id, Entry.revised_at, Entry.title, Entry.revision_note).where(Entry.revised_at > since)
    return {
        entry_id: (revised_at, title, note)
        for entry_id, revised_at, title, note in session.execute(query)
        if revised_at is not None
    }


def sent_copies(
    session: Session, entry_ids: Sequence[int], subscriber_ids: Sequence[int]
) -> list[tuple[int, int, int, datetime | None, datetime | None]]:
    """(subscriber, entry, digest, told at, planned at) of the ledger rows of these entries
    and of those of these subscribers who want revised entries listed; planned at is
    None unless the digest was sent."""
    rows = _received(session, sorted(entry_ids), _wanting_updates(session, sorted(subscriber_ids)))
    sent = _sent_digests(session, sorted({digest_id for _, _, digest_id, _ in rows}))
    return [(sid, eid, did, told, sent.get(did)) for sid, eid, did, told in rows]


def shown_urls(session: Session, digest_ids: Iterable[int]) -> dict[tuple[int, int], str]:
    """(digest, entry) -> where that digest linked the entry (its body's items)."""
    found: dict[tuple[int, int], str] = {}
    for part in chunks(sorted(set(digest_ids))):
        query = (
            select(Digest.id, BodyItem.entry_id, BodyItem.url)
            .join(BodyItem, BodyItem.body_key == Digest.body_key)
            .where(Digest.id.in_(part))
        )
        found.update(((digest_id, entry_id), url) for digest_id, entry_id, url in session.execute(query))
    return found


def write_told(
    session: Session, updates: Mapping[int, list[dict[str, Any]]], told: Iterable[tuple[int, int]], now: datetime
) -> None:
    """Pin *updates* (digest id -> the revised entries it tells) in those digests, and mark
    each (subscriber, entry) of *told* told at *now* in the ledger."""
    session.connection().execute(
        update(Digest.__table__).where(Digest.__table__.c.id == bindparam("did")).values(updates=bindparam("shown")),
        [{"did": digest_id, "shown": items} for digest_id, items in updates.items()],
    )
    ledger = LedgerEntry.__table__
    session.connection().execute(
        update(ledger)
        .where(and_(ledger.c.subscriber_id == bindparam("sid"), ledger.c.entry_id == bindparam("eid")))
        .values(reported_at=now),
        [{"sid": sid, "eid": entry_id} for sid, entry_id in told],
    )


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
