"""Delivery stage: who of a batch's readers is leaving, asked just before each message
goes on the wire.  Reads the unsubscribe journal and the store's statuses (read-only,
off the event loop); never writes, never sends.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy.orm import Session, sessionmaker

from bot.domain import SubscriberStatus
from bot.store.subscribers import subscriber_statuses
from bot.unsubscribes import Journal, journal_of, read_only_sessions

# How old the journal's word on who is leaving may be when a message goes on the wire: a
# reader who unsubscribes while their batch is being sent is not sent to after this.
LEAVERS_FRESH_SECONDS = 0.05


class LeavingLookup:
    """Who of a batch's readers is leaving: an unsubscribe acknowledged in the journal and
    not yet applied, or a status in the store that is no longer active (applied since the
    batch was built: a batch can wait behind a slow relay for minutes, and the endpoint
    applies requests within a second).  Never answered from a reading older than
    ``LEAVERS_FRESH_SECONDS``; read again in the background once it is half that old, so
    that the messages going out rarely wait for a reading (one read a batch at a time,
    off the event loop)."""

    def __init__(self, factory: sessionmaker[Session], subscriber_ids: set[int]) -> None:
        self.factory, self.subscriber_ids = factory, subscriber_ids
        self._store: sessionmaker[Session] | None = None  # read-only, opened at the first reading
        self.pending: set[int] = set()
        self.read_at = float("-inf")
        self._reading = asyncio.Lock()
        self._ahead: asyncio.Task[None] | None = None  # a reading started before it is needed

    async def leaving(self, subscriber_id: int) -> bool:
        age = time.monotonic() - self.read_at
        if age > LEAVERS_FRESH_SECONDS:
            await self._read_again(LEAVERS_FRESH_SECONDS)
        elif age > LEAVERS_FRESH_SECONDS / 2 and not self._reading.locked():
            self._ahead = asyncio.ensure_future(self._read_again(LEAVERS_FRESH_SECONDS / 2))
        return subscriber_id in self.pending

    async def _read_again(self, older_than: float) -> None:
        async with self._reading:
            if time.monotonic() - self.read_at > older_than:
                started = time.monotonic()
                journal = journal_of(self.factory)
                self.pending = await asyncio.to_thread(self._read, journal)
                self.read_at = started

    def _read(self, journal: Journal) -> set[int]:
        pending = journal.pending_subscribers(self.subscriber_ids)
        if self._store is None:  # on SQLite a reader that never takes the writer's lock
            self._store = read_only_sessions(self.factory)
        with self._store() as session:
            statuses = subscriber_statuses(session, self.subscriber_ids)
        gone = {i for i in self.subscriber_ids if statuses.get(i) is not SubscriberStatus.ACTIVE}
        return pending | gone

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()
        if self._store is not None and self._store is not self.factory:
            self._store.kw["bind"].dispose()
