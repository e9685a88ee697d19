"""A reader's Zotero library (``bot.zotero``): its connection, its synced items, the
papers saved to it and the journal of "Save to Zotero" asks.  SQL only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import delete, func, insert, select, true, update
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.domain.zotero_states import ConnectionState, SaveState
from bot.store.bulk import chunks, insert_ignoring_conflicts
from bot.store.taste_tables import LibraryPaperRow
from bot.store.zotero_tables import ZoteroConnectionRow, ZoteroItemRow, ZoteroSaveRequest, ZoteroSaveRow

CONNECTION = ZoteroConnectionRow
SAVE = ZoteroSaveRow


def connection_of(session: Session, subscriber_id: int) -> ZoteroConnectionRow | None:
    return session.get(ZoteroConnectionRow, subscriber_id)


def connections_of(session: Session, subscriber_ids: Sequence[int]) -> dict[int, ZoteroConnectionRow]:
    found: dict[int, ZoteroConnectionRow] = {}
    for part in chunks(sorted(set(subscriber_ids))):
        rows = session.scalars(select(ZoteroConnectionRow).where(ZoteroConnectionRow.subscriber_id.in_(part)))
        found.update((row.subscriber_id, row) for row in rows)
    return found


def put_connection(session: Session, subscriber_id: int, values: dict[str, object]) -> None:
    """Connect (or connect again, from the start): its items and version forgotten."""
    session.execute(delete(ZoteroConnectionRow).where(ZoteroConnectionRow.subscriber_id == subscriber_id))
    session.execute(insert(ZoteroConnectionRow).values(subscriber_id=subscriber_id, **values))
    session.execute(delete(ZoteroItemRow).where(ZoteroItemRow.subscriber_id == subscriber_id))


def drop_connection(session: Session, subscriber_id: int) -> bool:
    """Forget the connection (its sealed key with it) and the saves still waiting; the
    papers it brought stay in the library, as an upload's do.  Whether there was one."""
    session.execute(delete(ZoteroItemRow).where(ZoteroItemRow.subscriber_id == subscriber_id))
    session.execute(
        delete(ZoteroSaveRow).where(ZoteroSaveRow.subscriber_id == subscriber_id, SAVE.state == SaveState.PENDING)
    )
    result = session.execute(delete(ZoteroConnectionRow).where(ZoteroConnectionRow.subscriber_id == subscriber_id))
    return bool(result.rowcount)  # type: ignore[attr-defined]


def change_connection(session: Session, subscriber_id: int, **values: object) -> None:
    session.execute(update(ZoteroConnectionRow).where(CONNECTION.subscriber_id == subscriber_id).values(**values))


def due_connections(
    session: Session, states: Iterable[str], synced_before: datetime, tried_before: datetime | None = None
) -> list[int]:
    """The readers whose connection is in one of *states* and was never synced, or last
    before *synced_before*, and (given *tried_before*) not tried since then: those not
    synced longest first."""
    tried = CONNECTION.tried_at.is_(None) | (CONNECTION.tried_at < tried_before) if tried_before else true()
    query = (
        select(CONNECTION.subscriber_id)
        .where(
            CONNECTION.state.in_(list(states)),
            CONNECTION.synced_at.is_(None) | (CONNECTION.synced_at < synced_before),
            tried,
        )
        .order_by(CONNECTION.synced_at.is_not(None), CONNECTION.synced_at, CONNECTION.subscriber_id)
    )
    return list(session.scalars(query))


def item_papers(
    session: Session, subscriber_id: int, keys: Sequence[str] | None = None
) -> dict[str, tuple[int, str | None]]:
    """Each synced item's version and the library paper it became (only *keys*' when given)."""
    query = select(ZoteroItemRow.item_key, ZoteroItemRow.version, ZoteroItemRow.paper_key).where(
        ZoteroItemRow.subscriber_id == subscriber_id
    )
    if keys is None:
        return {key: (version, paper) for key, version, paper in session.execute(query)}
    found: dict[str, tuple[int, str | None]] = {}
    for part in chunks(sorted(set(keys))):
        rows = session.execute(query.where(ZoteroItemRow.item_key.in_(part)))
        found.update((key, (version, paper)) for key, version, paper in rows)
    return found


def put_items(session: Session, subscriber_id: int, items: Sequence[tuple[str, int, str | None]]) -> None:
    """Keep these items' versions and papers (replacing what was kept of them)."""
    forget_items(session, subscriber_id, [key for key, _, _ in items])
    if items:
        session.execute(
            insert(ZoteroItemRow),
            [{"subscriber_id": subscriber_id, "item_key": k, "version": v, "paper_key": p} for k, v, p in items],
        )


def forget_items(session: Session, subscriber_id: int, keys: Sequence[str]) -> None:
    for part in chunks(sorted(set(keys))):
        session.execute(
            delete(ZoteroItemRow).where(ZoteroItemRow.subscriber_id == subscriber_id, ZoteroItemRow.item_key.in_(part))
        )


def remove_synced_papers(session: Session, subscriber_id: int, keys: Iterable[str]) -> int:
    """Remove the library papers with these keys that a sync brought and no item still
    is (a paper the reader uploaded stays); how many."""
    held: set[str] = set()
    for part in chunks(sorted(set(keys))):
        query = select(ZoteroItemRow.paper_key).where(
            ZoteroItemRow.subscriber_id == subscriber_id, ZoteroItemRow.paper_key.in_(part)
        )
        held.update(key for key in session.scalars(query) if key)
    gone = sorted(set(keys) - held)
    removed = 0
    for part in chunks(gone):
        result = session.execute(
            delete(LibraryPaperRow).where(
                LibraryPaperRow.subscriber_id == subscriber_id,
                LibraryPaperRow.source == "zotero",
                LibraryPaperRow.key.in_(part),
            )
        )
        removed += result.rowcount  # type: ignore[attr-defined]
    return removed


# -- saves --------------------------------------------------------------------------


def ask_save(session: Session, subscriber_id: int, entry_id: int, write_token: str, now: datetime) -> bool:
    """A save of the entry for the reader, unless one was asked already; whether it is new."""
    values = {
        "subscriber_id": subscriber_id,
        "entry_id": entry_id,
        "write_token": write_token,
        "state": SaveState.PENDING,
        "attempts": 0,
        "asked_at": now,
    }
    if session.get(ZoteroSaveRow, (subscriber_id, entry_id)) is not None:
        return False
    insert_ignoring_conflicts(session, ZoteroSaveRow.__table__, [values])
    return True


def save_of(session: Session, subscriber_id: int, entry_id: int) -> ZoteroSaveRow | None:
    return session.get(ZoteroSaveRow, (subscriber_id, entry_id))


def pending_saves(session: Session, limit: int = 500) -> list[ZoteroSaveRow]:
    query = select(ZoteroSaveRow).where(SAVE.state == SaveState.PENDING).order_by(SAVE.asked_at).limit(limit)
    return list(session.scalars(query))


def change_save(session: Session, subscriber_id: int, entry_id: int, **values: object) -> None:
    session.execute(
        update(ZoteroSaveRow).where(SAVE.subscriber_id == subscriber_id, SAVE.entry_id == entry_id).values(**values)
    )


def save_counts(session: Session) -> dict[str, int]:
    query = select(SAVE.state, func.count()).group_by(SAVE.state)
    return {state: count for state, count in session.execute(query)}


# -- the journal of asks ------------------------------------------------------------------


def append_save_requests(session: Session, rows: Sequence[tuple[str, int, int]], now: datetime) -> None:
    """Journal (request id, subscriber id, entry id); durable once the caller commits."""
    session.execute(
        insert(ZoteroSaveRequest),
        [{"id": r, "subscriber_id": s, "entry_id": e, "received_at": now, "applied": False} for r, s, e in rows],
    )


def pending_save_requests(session: Session, limit: int = 5000) -> list[tuple[str, int, int]]:
    query = (
        select(ZoteroSaveRequest.id, ZoteroSaveRequest.subscriber_id, ZoteroSaveRequest.entry_id)
        .where(ZoteroSaveRequest.applied.is_(False))
        .order_by(ZoteroSaveRequest.received_at)
        .limit(limit)
    )
    return [(r, s, e) for r, s, e in session.execute(query)]


def requested_saves(session: Session, subscriber_id: int) -> set[int]:
    """The entries the reader asked to save that the store has not taken yet."""
    query = select(ZoteroSaveRequest.entry_id).where(
        ZoteroSaveRequest.applied.is_(False), ZoteroSaveRequest.subscriber_id == subscriber_id
    )
    return set(session.scalars(query))


def mark_save_requests(session: Session, request_ids: Sequence[str]) -> None:
    for part in chunks(sorted(request_ids)):
        session.execute(update(ZoteroSaveRequest).where(ZoteroSaveRequest.id.in_(part)).values(applied=True))


def emails_of(session: Session, subscriber_ids: Sequence[int]) -> dict[int, str]:
    """The addresses of these subscribers, by id (what ``library sync`` names them by)."""
    from bot.store.schema import SubscriberRow

    found: dict[int, str] = {}
    for part in chunks(sorted(set(subscriber_ids))):
        found.update(session.execute(select(SubscriberRow.id, SubscriberRow.email).where(SubscriberRow.id.in_(part))))
    return found


NOT_CONNECTED = (False, False)


def zotero_shown(session: Session, digests: Sequence[tuple[int, int, int | None]]) -> dict[int, tuple[bool, bool]]:
    """For each (digest, subscriber, original of a resend): whether it offers "Save to
    Zotero" (the reader's key may write, the connection works) and whether its footer
    says the connection broke (the digest ``tell_broken`` chose).  Digests of readers
    without a connection are left out: one look-up in an empty table where nobody
    connected one."""
    if not digests or session.scalar(select(CONNECTION.subscriber_id).limit(1)) is None:
        return {}
    connections = connections_of(session, [subscriber for _, subscriber, _ in digests])
    found = {}
    for digest_id, subscriber_id, original in digests:
        row = connections.get(subscriber_id)
        if row is not None:
            broken = row.state == ConnectionState.BROKEN
            told = row.told_digest_id is not None and row.told_digest_id in (digest_id, original)
            found[digest_id] = (row.can_write and not broken, broken and told)
    return found


def tell_broken(session: Session) -> int:
    """Each broken connection nobody was told of yet is told by its reader's next digest
    that no worker has claimed: that digest's footer says so (``zotero_shown``); how many."""
    from bot.store.schema import Digest

    waiting = select(CONNECTION.subscriber_id).where(
        CONNECTION.state == ConnectionState.BROKEN, CONNECTION.told_digest_id.is_(None)
    )
    told = 0
    for subscriber_id in list(session.scalars(waiting)):
        digest_id = session.scalar(
            select(func.min(Digest.id)).where(Digest.subscriber_id == subscriber_id, Digest.state == DigestState.QUEUED)
        )
        if digest_id is not None:
            change_connection(session, subscriber_id, told_digest_id=digest_id)
            told += 1
    return told
