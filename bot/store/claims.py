"""Store: the ledger read back: which entries a reader's digests have claimed (their
bodies' items), for one reader, a batch of readers, or the readers of one entry.  SQL
only; ``ledger`` writes the claims.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.store.bulk import CHUNK, chunks
from bot.store.schema import BodyItem, Digest


def claimed_entry_ids(session: Session, subscriber_id: int) -> set[int]:
    """Entries already carried (or being carried) by a digest to this subscriber."""
    return set(
        session.scalars(
            select(BodyItem.entry_id)
            .join(Digest, Digest.body_key == BodyItem.body_key)
            .where(Digest.subscriber_id == subscriber_id)
        )
    )


def claimed_from(session: Session, subscriber_ids: Sequence[int], entry_ids: Sequence[int]) -> dict[int, set[int]]:
    """Per subscriber, which of *entry_ids* (their window's entries) are claimed.

    A watermarked window is about a day of entries shared by a batch of
    subscribers: then the bodies holding each entry (an index on the entry) and
    their digests, however long the history.  A window longer than the
    subscribers are many (no watermark yet, a changed filter or tag rules) is read
    through the subscribers' digests instead: their own bodies, not one look-up per
    entry of their whole backfill."""
    wanted = set(subscriber_ids)
    window = set(entry_ids)
    if len(entry_ids) > max(CHUNK, len(wanted)):
        rows = _claims_of_subscribers(session, sorted(wanted), min(entry_ids))
    else:
        rows = ((sid, eid) for _, sid, eid in claims_on(session, entry_ids, min(wanted), max(wanted)))
    found: dict[int, set[int]] = {}
    for subscriber_id, entry_id in rows:
        if subscriber_id in wanted and entry_id in window:
            found.setdefault(subscriber_id, set()).add(entry_id)
    return found


def _claims_of_subscribers(session: Session, subscriber_ids: list[int], first_entry: int) -> Iterator[tuple[int, int]]:
    """(subscriber, entry) of these subscribers' claims on entries from *first_entry* on:
    their own digests' bodies, each body read once however many of them it went to."""
    shown: dict[str, list[int]] = {}
    for part in chunks(subscriber_ids):
        query = select(Digest.body_key, Digest.subscriber_id).where(
            Digest.subscriber_id.in_(part), Digest.body_key.is_not(None)
        )
        for key, subscriber_id in session.execute(query):
            shown.setdefault(key or "", []).append(subscriber_id)
    for keys in chunks(sorted(shown)):
        query = select(BodyItem.body_key, BodyItem.entry_id).where(
            BodyItem.body_key.in_(keys), BodyItem.entry_id >= first_entry
        )
        for key, entry_id in session.execute(query):
            for subscriber_id in shown[key]:
                yield subscriber_id, entry_id


def claims_on(
    session: Session, entry_ids: Sequence[int], lowest: int, highest: int, before: int | None = None
) -> Iterator[tuple[int, int, int]]:
    """(digest, subscriber, entry) of the claims on *entry_ids* by subscribers whose ids
    lie in [lowest, highest] (by digests older than *before*, if given).

    Two look-ups, each down one index, joined here: the bodies holding the entries
    (``ix_body_items_entry_id``), then those bodies' digests in the subscriber range
    (``ix_digests_body_key_subscriber_id``).  As one join, SQLite's planner may start
    from the subscriber range instead and read every digest those subscribers were
    ever sent."""
    bodies: dict[str, list[int]] = {}
    for part in chunks(list(entry_ids)):
        for key, entry_id in session.execute(
            select(BodyItem.body_key, BodyItem.entry_id).where(BodyItem.entry_id.in_(part))
        ):
            bodies.setdefault(key, []).append(entry_id)
    for keys in chunks(sorted(bodies)):
        query = select(Digest.id, Digest.subscriber_id, Digest.body_key).where(
            Digest.body_key.in_(keys), Digest.subscriber_id.between(lowest, highest)
        )
        if before is not None:
            query = query.where(Digest.id < before)
        for digest_id, subscriber_id, shown in session.execute(query):
            for entry_id in bodies[shown or ""]:
                yield digest_id, subscriber_id, entry_id
