"""Revised entries (arXiv ``replace``) that subscribers received before: the queries
``bot.plan.revisions`` decides from, and the writes that pin what it told whom in the
digest that tells them and note it told (``revision_notices``).  SQL only.

Every query here starts from what it is about, by construction: the few entries revised
since a moment (an index on ``revised_at``), then the digest bodies holding those
entries (an index on the entry) and their digests of the subscribers being planned,
then those digests by their keys, then the told entries' links from those digests'
bodies.  None can begin from every digest ever sent, which once made planning
quadratic in subscribers and grow with the history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, tuple_, update
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.store.bulk import chunks
from bot.store.claims import claims_on
from bot.store.schema import BodyItem, Digest, Entry, RevisionNotice, SubscriberRow


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
    """(subscriber, entry, digest, told at, planned at) of the digests that carried these
    entries to those of these subscribers who want revised entries listed; planned at
    is None unless the digest was sent."""
    rows = _received(session, sorted(entry_ids), wanting_updates(session, sorted(subscriber_ids)))
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
    """Pin *updates* (digest id -> the revised entries it tells) in those digests, and note
    each (subscriber, entry) of *told* told at *now*."""
    if updates:
        session.connection().execute(
            update(Digest.__table__)
            .where(Digest.__table__.c.id == bindparam("did"))
            .values(updates=bindparam("shown")),
            [{"did": digest_id, "shown": items} for digest_id, items in updates.items()],
        )
    pairs = sorted(set(told))
    notices = RevisionNotice.__table__
    for part in chunks(pairs):
        session.execute(delete(notices).where(tuple_(notices.c.subscriber_id, notices.c.entry_id).in_(part)))
        session.execute(
            insert(notices), [{"subscriber_id": sid, "entry_id": eid, "reported_at": now} for sid, eid in part]
        )


def wanting_updates(session: Session, subscriber_ids: list[int]) -> list[int]:
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
    """(subscriber, entry, digest, told at) of the digests that carried these entries to
    these subscribers: the bodies holding each entry, then their digests."""
    if not subscriber_ids:
        return []
    people = set(subscriber_ids)
    carried = [
        (sid, eid, did)
        for did, sid, eid in claims_on(session, entry_ids, subscriber_ids[0], subscriber_ids[-1])
        if sid in people
    ]
    told: dict[tuple[int, int], datetime] = {}
    notices = RevisionNotice.__table__
    for part in chunks(sorted({(sid, eid) for sid, eid, _ in carried})):
        query = select(notices.c.subscriber_id, notices.c.entry_id, notices.c.reported_at).where(
            tuple_(notices.c.subscriber_id, notices.c.entry_id).in_(part)
        )
        told.update(((sid, eid), at) for sid, eid, at in session.execute(query))
    return [(sid, eid, did, told.get((sid, eid))) for sid, eid, did in carried]


def _sent_digests(session: Session, digest_ids: list[int]) -> dict[int, datetime]:
    """When each of these digests was planned, for those that were sent (by primary key)."""
    found: dict[int, datetime] = {}
    for part in chunks(digest_ids):
        query = select(Digest.id, Digest.planned_at).where(Digest.id.in_(part), Digest.state == DigestState.SENT.value)
        found.update((digest_id, planned_at) for digest_id, planned_at in session.execute(query))
    return found
