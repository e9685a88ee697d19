"""Store: what readers were sent, read through their digests' bodies a batch of readers
at a time, and the check that a write gives no reader an entry twice.

SQL only.  A reader's digests planned since a time name the bodies that may hold the
entries first seen since then; readers of one filter share them, so they are read a
group at a time (``ix_digests_subscriber_planned``), not a month of rows per reader.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import String, func, literal_column, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.orm import Session

from bot.store.bulk import among, chunks
from bot.store.ledger import EntriesTaken
from bot.store.schema import BodyItem, Digest, Entry


def body_groups_since(
    session: Session,
    lowest: int,
    highest: int,
    since: datetime | None,
    *,
    before: int | None = None,
    leaving_out: Sequence[int] = (),
) -> list[tuple[str, list[int]]]:
    """The subscribers with an id in [lowest, highest] grouped by the bodies of their
    digests planned since *since* (older than digest *before*, if given, and not those
    of *leaving_out*): each group's body keys, space-separated, and its subscribers.
    What a subscriber may have been sent of the entries first seen since then (a digest
    planned earlier holds only entries first seen before it); the readers of one filter
    planned on the same days share one group, so a batch reads a row per group, not a
    month of digests per reader (``ix_digests_subscriber_planned`` holds the rest)."""
    if session.get_bind().dialect.name == "postgresql":
        keys = func.string_agg(Digest.body_key, aggregate_order_by(literal_column("' '"), Digest.body_key))
    else:  # read in the index's order: planned at, then body
        keys = func.group_concat(Digest.body_key, " ")
    query = select(Digest.subscriber_id, keys.label("body_keys")).where(
        Digest.subscriber_id.between(lowest, highest), Digest.body_key.is_not(None)
    )
    if since is not None:
        query = query.where(Digest.planned_at >= since)
    if before is not None:
        query = query.where(Digest.id < before)
    for part in chunks(sorted(set(leaving_out))):
        query = query.where(Digest.id.not_in(part))
    readers = query.group_by(Digest.subscriber_id).subquery()
    shown = readers.c["body_keys"]
    grouped = select(shown, func.aggregate_strings(sql_cast(readers.c.subscriber_id, String), " ")).group_by(shown)
    return [(group, [int(n) for n in ids.split()]) for group, ids in session.execute(grouped)]


def entries_of_bodies(session: Session, keys: Iterable[str]) -> dict[str, list[int]]:
    """The entries each body of *keys* holds, in no order: a row a body, not an item."""
    found: dict[str, list[int]] = {}
    entry_ids = func.aggregate_strings(sql_cast(BodyItem.entry_id, String), " ")
    for part in chunks(sorted(set(keys))):
        query = select(BodyItem.body_key, entry_ids).where(among(session, BodyItem.body_key, part))
        for key, ids in session.execute(query.group_by(BodyItem.body_key)):
            found[key] = list(map(int, ids.split()))
    return found


def refuse_double_claims(
    session: Session,
    written: Sequence[tuple[int, int, Sequence[int]]],
    first_new: int | None,
    bodies: dict[str, frozenset[int]] | None = None,
    *,
    since: datetime | None = None,
) -> None:
    """Raise ``EntriesTaken`` when an entry of one of the digests just *written*
    (digest, subscriber, entry ids) is claimed by another digest of its subscriber:
    what a primary key on (entry, subscriber) refused when the ledger had one.

    The digests this write inserted have the newest ids, from *first_new* on (a rival
    writer for one of these subscribers committed before they were given, or waits
    for this one: ``lock_subscribers``), so only claims by older digests are read,
    not this write's own; the empty days it filled are older and told apart here.  A
    digest holds only entries first seen before it was planned, so the subscribers'
    digests planned since the oldest of these entries was first seen are all that may
    hold one: about a window's worth each.  *bodies*: what the caller already read of
    bodies (a body key names its content, so what it holds never changes); the others
    are read and added to it.  *since*: when the oldest of the entries was first seen,
    if the caller knows (else it is read)."""
    wanted = _given(written)
    if not any(wanted.values()):
        return
    if since is None:
        since = _oldest_first_seen(session, sorted(set().union(*wanted.values())))
    ours = {digest_id for digest_id, _, _ in written}
    older = [digest_id for digest_id in ours if first_new is None or digest_id < first_new]  # days it filled
    groups = body_groups_since(session, min(wanted), max(wanted), since, before=first_new, leaving_out=older)
    # Readers of one filter share their bodies and what they are given now: each pair
    # of those is looked at once.
    pairs = {
        (keys, wanted[subscriber_id]): subscriber_id
        for keys, subscriber_ids in groups
        for subscriber_id in subscriber_ids
        if subscriber_id in wanted
    }
    known = {} if bodies is None else bodies
    read_bodies(session, {key for keys, _ in pairs for key in keys.split()}, known)
    _refuse_any_taken(pairs, known)


def _refuse_any_taken(pairs: dict[tuple[str, frozenset[int]], int], known: dict[str, frozenset[int]]) -> None:
    for (keys, entries), subscriber_id in pairs.items():
        for key in keys.split():
            if taken := entries & known[key]:
                raise EntriesTaken(f"entry #{min(taken)} is already in a digest of subscriber #{subscriber_id}")


def _given(written: Sequence[tuple[int, int, Sequence[int]]]) -> dict[int, frozenset[int]]:
    """Per subscriber, the entries *written* gives them (one set per distinct list)."""
    shared: dict[tuple[int, ...], frozenset[int]] = {}
    wanted: dict[int, frozenset[int]] = {}
    for _, subscriber_id, entries in written:
        key = tuple(entries)
        found = shared[key] if key in shared else shared.setdefault(key, frozenset(key))
        wanted[subscriber_id] = wanted[subscriber_id] | found if subscriber_id in wanted else found
    return wanted


def _oldest_first_seen(session: Session, entry_ids: list[int]) -> datetime | None:
    found = (
        session.scalar(select(func.min(Entry.first_seen_at)).where(Entry.id.in_(part))) for part in chunks(entry_ids)
    )
    return min((oldest for oldest in found if oldest is not None), default=None)


def read_bodies(session: Session, keys: Iterable[str], known: dict[str, frozenset[int]]) -> None:
    """Add to *known* what each body of *keys* it lacks holds."""
    missing = set(keys) - known.keys()
    if missing:
        found = entries_of_bodies(session, missing)
        known.update((key, frozenset(found.get(key, ()))) for key in missing)
