"""Subscriber endpoint: the tag menu of the sign-up and manage pages, read from the store.

Read at most every ``TAG_MENU_SECONDS``: the sign-up page is public, and counting
every entry's tags on each view would let anyone load the store.  Reads only.
"""

from __future__ import annotations

import time

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from bot.store.entry_reads import tag_counts

TAG_MENU_SECONDS = 300.0


class TagMenu:
    """The store's tags with their counts, as the menu offers them."""

    def __init__(self, read_only: sessionmaker[Session]) -> None:
        self.read_only = read_only
        self._read_at = -TAG_MENU_SECONDS
        self._tags: list[tuple[str, int]] = []

    async def tags(self) -> list[tuple[str, int]]:
        if time.monotonic() - self._read_at >= TAG_MENU_SECONDS:
            self._tags = await run_in_threadpool(self._read)
            self._read_at = time.monotonic()
        return self._tags

    def _read(self) -> list[tuple[str, int]]:
        with self.read_only() as session:
            return [(label, count) for label, count, _ in tag_counts(session)]
