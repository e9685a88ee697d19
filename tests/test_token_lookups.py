"""Subscriber endpoint: token look-ups are read in groups, and a failed read fails only its group."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.store.engine import make_engine, sessions
from bot.store.subscribers import list_subscribers
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tokens import make_token
from bot.web.lookups import TokenLookups

KEY = b"k" * 32
NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)


def _tokens(factory: sessionmaker[Session], count: int) -> dict[str, str]:
    """token -> address of *count* new subscribers."""
    save(factory, Settings(), [clean_fields(f"t{i}@example.org") for i in range(count)], NOW)
    with factory() as session:
        return {make_token(KEY, s.id, s.unsubscribe_secret): s.email for s in list_subscribers(session)}


def test_concurrent_lookups_share_a_few_reads(factory: sessionmaker[Session]) -> None:
    tokens = _tokens(factory, 150)
    valid = list(tokens)
    forged = [t[:-1] + ("A" if t[-1] != "A" else "B") for t in valid[:20]]
    asked = valid + forged + ["999999.AAAAAAAAAAAAAAAAAAAAAAAA", "not-a-token", valid[0]]
    selects: list[str] = []
    event.listen(
        factory.kw["bind"],
        "before_cursor_execute",
        lambda _c, _cur, statement, *_a: selects.append(statement) if "FROM subscribers" in statement else None,
    )

    async def run() -> list[str | None]:
        lookups = TokenLookups(factory, KEY)
        try:
            found = await asyncio.gather(*(lookups.subscriber(token) for token in asked))
        finally:
            await lookups.stop()
        return [s.email if s else None for s in found]

    emails = asyncio.run(run())
    assert emails == [tokens[t] for t in valid] + [None] * 22 + [tokens[valid[0]]]
    assert 1 <= len(selects) <= 3, f"{len(selects)} reads for {len(asked)} look-ups"


def test_a_failed_read_fails_its_own_requests_and_the_next_ones_are_read(tmp_path: Path) -> None:
    broken = sessions(make_engine(f"sqlite:///{tmp_path / 'empty.sqlite3'}"))  # no tables

    async def run() -> None:
        lookups = TokenLookups(broken, KEY)
        try:
            for _ in range(2):  # the loop survives the first failure
                with pytest.raises(OperationalError):
                    await asyncio.wait_for(lookups.subscriber("1.AAAAAAAAAAAAAAAAAAAAAAAA"), 5)
            assert await asyncio.wait_for(lookups.subscriber("no token"), 5) is None
        finally:
            await lookups.stop()

    asyncio.run(run())
