"""Subscriber endpoint: journaling unsubscribes in groups, applying them in the background.

Every request waits for its own commit to the journal (so a 200 means
durable), but concurrent requests share one commit: a burst of hundreds
costs a few syncs, not hundreds.  A journal that cannot be written (a busy
lock, a full disk) is retried for ``ACK_SECONDS``; a request still not journaled
then is answered "try again in a minute" (503) and withdrawn, so nothing is
acknowledged that is not journaled, no request waits longer, and a stop never
waits for a disk to empty.  Applying to the store runs in the background, off
the request.  Never renders and never decides who may unsubscribe (``app`` does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from bot.unsubscribes import Journal

log = logging.getLogger(__name__)

APPLY_EVERY_SECONDS = 0.5
RETRY_SECONDS = (0.05, 0.1, 0.2, 0.5, 1.0)
# How long a request waits for the journal to take it before it is answered "try again".
ACK_SECONDS = 5.0


class NotJournaled(Exception):
    """The journal could not be written within ``ACK_SECONDS``: the request was not taken."""


class Acknowledger:
    """Group commit of unsubscribes to the journal, and the background applier."""

    def __init__(
        self,
        journal: Journal,
        factory: sessionmaker[Session],
        now: Callable[[], datetime],
        also: Callable[[], object] = lambda: None,
    ) -> None:
        self.journal, self.factory, self.now = journal, factory, now
        self.also = also  # applied beside the unsubscribes: the journal's other asks (Zotero saves)
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self.acknowledged: set[int] = set()  # by this process, until the applier has applied them
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._commit_loop()), asyncio.ensure_future(self._apply_loop())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await run_in_threadpool(self.journal.try_apply_pending, self.factory)

    async def acknowledge(self, subscriber_id: int) -> None:
        """Return once an unsubscribe of *subscriber_id* is durable in the journal; raise
        ``NotJournaled`` when it is not within ``ACK_SECONDS`` (it is then withdrawn: a
        later commit may still take it, which only does what was asked)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((subscriber_id, done))
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(done), ACK_SECONDS)
        except TimeoutError:
            if done.done() and not done.cancelled():
                return  # journaled at the last moment
            done.cancel()
            raise NotJournaled(f"the unsubscribe journal took no write for {ACK_SECONDS:g} s") from None

    async def _commit_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            group, self._waiting = self._waiting, []
            if group:
                await self._commit(group)

    async def _commit(self, group: list[tuple[int, asyncio.Future[None]]]) -> None:
        attempt = 0
        while True:
            group = [(sid, done) for sid, done in group if not done.done()]  # those still waiting
            if not group:
                return
            try:
                await run_in_threadpool(self.journal.append, [sid for sid, _ in group], self.now())
                break
            except SQLAlchemyError as exc:
                delay = RETRY_SECONDS[min(attempt, len(RETRY_SECONDS) - 1)]
                log.warning("unsubscribe journal not written (%s); retrying in %g s", type(exc).__name__, delay)
                attempt += 1
                await asyncio.sleep(delay)
        self.acknowledged.update(sid for sid, _ in group)
        for _, done in group:
            if not done.done():
                done.set_result(None)

    async def _apply_loop(self) -> None:
        while True:
            await asyncio.sleep(APPLY_EVERY_SECONDS)
            try:
                done = set(self.acknowledged)
                if await run_in_threadpool(self.journal.try_apply_pending, self.factory):
                    self.acknowledged -= done
            except SQLAlchemyError as exc:  # the journal itself unreadable for a moment
                log.warning("unsubscribes not applied: %s", type(exc).__name__)
            try:
                await run_in_threadpool(self.also)
            except Exception as exc:  # noqa: BLE001 - the journal's other asks never stop the unsubscribes
                log.warning("the journal's other asks not taken: %s", type(exc).__name__)
