"""Subscriber endpoint: reading the subscribers that link tokens name, in groups.

Every request needs its token's subscriber.  Read one by one, each costs a hop
to the thread pool and a query, and under a burst of one-click unsubscribes the
hops were the endpoint's biggest cost.  Here the tokens that arrive while a read
runs wait for the next read, which takes them all in one hop and one query.
Never decides what a request may do (``app`` does) and never writes.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from bot.domain import Subscriber
from bot.subscribers.subscriptions import by_tokens

log = logging.getLogger(__name__)


class TokenLookups:
    """Subscribers by link token, read from *read_only* in groups."""

    def __init__(self, read_only: sessionmaker[Session], key: bytes) -> None:
        self.read_only, self.key = read_only, key
        self._waiting: dict[str, list[asyncio.Future[Subscriber | None]]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._read_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def subscriber(self, token: str) -> Subscriber | None:
        """The subscriber *token* belongs to; None for unknown, forged and altered tokens.
        Raises what the read raised (the store unreachable, say)."""
        if self._task is None:  # an app served without its lifespan
            self.start()
        found: asyncio.Future[Subscriber | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(token, []).append(found)
        self._wake.set()
        return await found

    async def _read_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            group, self._waiting = self._waiting, {}
            if not group:
                continue
            try:
                found = await run_in_threadpool(by_tokens, self.read_only, self.key, group)
            except Exception as exc:  # every waiting request answers it (a 500), the loop goes on
                for waiting in group.values():
                    for future in waiting:
                        if not future.done():
                            future.set_exception(exc)
                continue
            for token, waiting in group.items():
                for future in waiting:
                    if not future.done():
                        future.set_result(found.get(token))
