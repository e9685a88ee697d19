"""Unsubscribe requests (and "Save to Zotero" asks): acknowledged once journaled,
applied to the store later.

The subscriber endpoint answers a one-click unsubscribe as soon as the
request is in the journal (``bot.store.journal``), which never waits for the
store's writer.  ``apply_pending`` then changes the subscribers' status, each
request exactly once, with a retry whenever the store is busy; the planner and
the worker call it before they decide anything, and treat a request they could
not apply yet as applied (``pending_subscribers``).  Never renders or sends.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from bot.store import journal as store
from bot.store import zotero as zotero_store
from bot.store.engine import make_engine, sessions, transaction

log = logging.getLogger(__name__)

# Journal commits are short; a writer waits this long for another process's commit.
BUSY_TIMEOUT_MS = 10_000


class Journal:
    """The journal of one store (one per process and store: see ``journal_for``)."""

    def __init__(self, writer: Engine, read_only: Engine) -> None:
        self.engines = (writer, read_only)
        self.factory: sessionmaker[Session] = sessions(writer)
        self.read_only: sessionmaker[Session] = sessions(read_only)
        # One writer at a time in this process: SQLite's busy handler would otherwise make
        # the appends and the applier's marks wait for each other in sleeps of up to 100 ms.
        self._writing = threading.Lock()

    def close(self) -> None:
        """Close the journal's pooled connections."""
        for engine in self.engines:
            engine.dispose()

    def append(self, subscriber_ids: Sequence[int], now: datetime) -> list[str]:
        """Journal one request per subscriber id; durable when this returns.  Their ids."""
        rows = [(uuid.uuid4().hex, sid) for sid in subscriber_ids]
        with self._writing, transaction(self.factory) as session:
            store.append_requests(session, rows, now)
        return [rid for rid, _ in rows]

    def append_saves(self, asked: Sequence[tuple[int, int]], now: datetime) -> list[str]:
        """Journal one "Save to Zotero" per (subscriber id, entry id); durable when this
        returns (``bot.zotero.saves`` applies them).  Their ids."""
        rows = [(uuid.uuid4().hex, sid, eid) for sid, eid in asked]
        with self._writing, transaction(self.factory) as session:
            zotero_store.append_save_requests(session, rows, now)
        return [rid for rid, _, _ in rows]

    def pending_saves(self) -> list[tuple[str, int, int]]:
        with self.read_only() as session:
            return zotero_store.pending_save_requests(session)

    def saves_asked(self, subscriber_id: int) -> set[int]:
        """The entries *subscriber_id* asked to save that are not applied yet."""
        with self.read_only() as session:
            return zotero_store.requested_saves(session, subscriber_id)

    def mark_saves_applied(self, request_ids: Sequence[str]) -> None:
        with self._writing, transaction(self.factory) as session:
            zotero_store.mark_save_requests(session, request_ids)

    def pending_subscribers(self, subscriber_ids: Iterable[int] | None = None) -> set[int]:
        with self.read_only() as session:
            return store.pending_subscribers(session, subscriber_ids)

    def apply_pending(self, factory: sessionmaker[Session], now: datetime | None = None) -> int:
        """Apply every pending request to the store (*factory*); how many were pending.
        Raises ``OperationalError`` when the store stays busy: nothing is lost, the
        requests stay pending for the next call."""
        applied = 0
        while True:
            with self.read_only() as session:
                batch = store.pending_requests(session)
            if not batch:
                return applied
            with transaction(factory) as session:
                changed = store.apply_requests(session, batch, now or datetime.now(UTC))
            with self._writing, transaction(self.factory) as session:
                store.mark_applied(session, [rid for rid, _ in batch])
            for subscriber_id in changed:
                log.info("subscriber %d unsubscribed through their link", subscriber_id)
            applied += len(batch)

    def try_apply_pending(self, factory: sessionmaker[Session]) -> bool:
        """``apply_pending``, or False (logged) when the store is busy."""
        try:
            self.apply_pending(factory)
        except OperationalError as exc:
            log.info("unsubscribes not applied yet (store busy: %s); they stay pending", type(exc.orig).__name__)
            return False
        return True


_JOURNALS: dict[str, Journal] = {}
_LOCK = threading.Lock()


def journal_of(factory: sessionmaker[Session]) -> Journal:
    """The journal of the store *factory* opens, opened once per process."""
    bind = factory.kw["bind"]
    url = bind.url.render_as_string(hide_password=False)
    with _LOCK:
        if url not in _JOURNALS:
            timeout = BUSY_TIMEOUT_MS if bind.dialect.name == "sqlite" else 0
            _JOURNALS[url] = Journal(*store.open_journal(url, busy_timeout_ms=timeout))
        return _JOURNALS[url]


def close_journal(store_url: str) -> None:
    """Close the journal of *store_url* this process opened, if any (its store is going
    away; without this its connections stay open for the life of the process)."""
    with _LOCK:
        journal = _JOURNALS.pop(store_url, None)
    if journal is not None:
        journal.close()


def read_only_sessions(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """Sessions on the store of *factory* that only read: on SQLite they never wait for
    the writer (WAL); on PostgreSQL reads never wait anyway, so *factory* itself."""
    bind = factory.kw["bind"]
    if bind.dialect.name != "sqlite":
        return factory
    url = bind.url.render_as_string(hide_password=False)
    return sessions(make_engine(url, busy_timeout_ms=BUSY_TIMEOUT_MS, read_only=True))
