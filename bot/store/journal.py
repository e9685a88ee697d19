"""Store: the unsubscribe journal (acknowledged requests) and applying them.

SQL only.  On SQLite the journal is a database file of its own beside the
store (``<store>-unsubscribes.sqlite3``, WAL, ``synchronous=FULL``): appending
to it never waits for the store's one writer, and a commit there survives a
crash of the machine as well as of the process.  On PostgreSQL it is the
store's own ``unsubscribe_requests`` table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from bot.domain.statuses import UNSUBSCRIBE
from bot.store.bulk import bulk_insert, chunks, insert_ignoring_conflicts
from bot.store.engine import make_engine
from bot.store.response_tables import AppliedUnsubscribe, Consent, UnsubscribeRequest
from bot.store.schema import SubscriberRow
from bot.store.store_errors import StoreError, meaning
from bot.store.zotero_tables import ZoteroSaveRequest

REQUESTS = UnsubscribeRequest.__table__
# The journal's other kind of request: a "Save to Zotero" (``bot.zotero.saves``).
SAVE_REQUESTS = ZoteroSaveRequest.__table__


def journal_url(store_url: str) -> str:
    """Where the journal of the store at *store_url* lives."""
    parsed = make_url(store_url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return store_url
    path = Path(parsed.database)
    return str(parsed.set(database=str(path.with_name(f"{path.stem}-unsubscribes.sqlite3"))))


def open_journal(store_url: str, *, busy_timeout_ms: int) -> tuple[Engine, Engine]:
    """Engines on the journal, for writing and for reading (which never waits for a
    writer); its table is created when it is a file of its own."""
    url = journal_url(store_url)
    writer = make_engine(url, busy_timeout_ms=busy_timeout_ms, sqlite_cache_mb=2, durable=True)
    if url != store_url:
        try:
            with writer.begin() as conn:
                REQUESTS.create(conn, checkfirst=True)
                SAVE_REQUESTS.create(conn, checkfirst=True)
        except DBAPIError as exc:  # named here: the journal is a file of its own beside the store
            writer.dispose()
            where = f"the unsubscribe journal {make_url(url).database}"
            said = " ".join(str(exc.orig).split())[:200]
            if "not a database" in said:
                raise StoreError(
                    f"{where}: it is not a SQLite database ({said}); if it was damaged, move it aside and "
                    "digestbot starts a new one (unsubscribes it held and had not applied yet are lost)"
                ) from None
            raise StoreError(meaning(exc, where) or f"{where}: {said}") from None
    return writer, make_engine(url, busy_timeout_ms=busy_timeout_ms, sqlite_cache_mb=2, read_only=True)


def append_requests(session: Session, rows: Sequence[tuple[str, int]], now: datetime) -> None:
    """Journal (request id, subscriber id) pairs; durable once the caller commits."""
    session.execute(
        insert(UnsubscribeRequest),
        [{"id": rid, "subscriber_id": sid, "received_at": now, "applied": False} for rid, sid in rows],
    )


def pending_requests(session: Session, limit: int = 5000) -> list[tuple[str, int]]:
    """Requests not yet applied, oldest first."""
    query = (
        select(UnsubscribeRequest.id, UnsubscribeRequest.subscriber_id)
        .where(UnsubscribeRequest.applied.is_(False))
        .order_by(UnsubscribeRequest.received_at)
        .limit(limit)
    )
    return [(rid, sid) for rid, sid in session.execute(query)]


def pending_subscribers(session: Session, subscriber_ids: Iterable[int] | None = None) -> set[int]:
    """Which of *subscriber_ids* (all, with None) have an unsubscribe not yet applied."""
    query = select(UnsubscribeRequest.subscriber_id).where(UnsubscribeRequest.applied.is_(False))
    if subscriber_ids is None:
        return set(session.scalars(query))
    found: set[int] = set()
    for part in chunks(sorted(set(subscriber_ids))):
        found.update(session.scalars(query.where(UnsubscribeRequest.subscriber_id.in_(part))))
    return found


def mark_applied(session: Session, request_ids: Sequence[str]) -> None:
    for part in chunks(list(request_ids)):
        session.execute(update(UnsubscribeRequest).where(UnsubscribeRequest.id.in_(part)).values(applied=True))


# The unsubscribe rule (``bot.domain.statuses``) in SQL: whom it leaves as they are.
_STAYING = sorted(status.value for status in UNSUBSCRIBE.staying)


def apply_requests(session: Session, requests: Sequence[tuple[str, int]], now: datetime) -> list[int]:
    """In the store: unsubscribe each request's subscriber unless that request was applied
    before, and record it as applied.  Returns the subscribers whose status changed."""
    ids = [rid for rid, _ in requests]
    done: set[str] = set()
    for part in chunks(ids):
        done.update(
            session.scalars(select(AppliedUnsubscribe.request_id).where(AppliedUnsubscribe.request_id.in_(part)))
        )
    fresh = [(rid, sid) for rid, sid in requests if rid not in done]
    if not fresh:
        return []
    insert_ignoring_conflicts(
        session, AppliedUnsubscribe.__table__, [{"request_id": rid, "applied_at": now} for rid, _ in fresh]
    )
    changed: list[tuple[int, str]] = []
    for part in chunks(sorted({sid for _, sid in fresh})):
        changed += session.execute(
            update(SubscriberRow)
            .where(SubscriberRow.id.in_(part), SubscriberRow.status.not_in(_STAYING))
            .values(status=UNSUBSCRIBE.after.value, updated_at=now)
            .returning(SubscriberRow.id, SubscriberRow.email)
        ).all()
    consents = [
        {"subscriber_id": sid, "event": "unsubscribe", "at": now, "address": email, "page": ONE_CLICK, "client": ""}
        | {"detail": ""}
        for sid, email in changed
    ]
    bulk_insert(session, Consent.__table__, consents)
    return [sid for sid, _ in changed]


# Where an unsubscribe from the journal was asked, as the consent record says it.
ONE_CLICK = "the one-click unsubscribe link (List-Unsubscribe, or the page it opens)"


def journal_size(session: Session) -> tuple[int, int]:
    """(requests, of which pending)."""
    total = session.scalar(select(func.count()).select_from(UnsubscribeRequest)) or 0
    pending = (
        session.scalar(
            select(func.count()).select_from(UnsubscribeRequest).where(UnsubscribeRequest.applied.is_(False))
        )
        or 0
    )
    return total, pending
