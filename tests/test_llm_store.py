"""The store's part of the language-model stage (bot.store.tldrs), on SQLite and
PostgreSQL: a TL;DR kept once per entry and language, the readers' languages, the day's
spending, and the TL;DRs gone with their entries."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.domain.llm import Tldr
from bot.ingest.storing import ingest_bytes
from bot.store.llm_tables import EntryTldrRow
from bot.store.schema import Entry, SubscriberRow
from bot.store.tldrs import (
    add_spending,
    reader_filters,
    save_tldr,
    set_language,
    spent_on,
    tldrs_for,
    without_tldr,
)
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from tests.conftest import ROOT
from tests.helpers import render_dump, settings_for

NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)


def _entries(factory: sessionmaker[Session], count: int) -> list[int]:
    papers = [(f"Paper {n}", ["Ada"], NOW.date(), f"About attention {n}.") for n in range(count)]
    ingest_bytes(
        factory, render_dump(papers).encode(), name="d", now=NOW, rules=load_rules(ROOT / "config" / "tags.toml")
    )
    with factory() as session:
        return list(session.scalars(select(Entry.id).order_by(Entry.id)))


def test_a_tldr_is_kept_once_per_entry_and_language(factory: sessionmaker[Session]) -> None:
    first, second, third = _entries(factory, 3)
    written = Tldr("A faster kernel.", "en", "llama3.1:8b", NOW)
    with factory() as session, session.begin():
        assert save_tldr(session, first, written)
        assert save_tldr(session, first, Tldr("一个更快的内核。", "zh", "qwen2.5:7b", NOW))
        assert not save_tldr(session, first, Tldr("Another answer.", "en", "other", NOW))  # asked once
    with factory() as session:
        assert tldrs_for(session, [first, second, third], "en") == {first: written}
        assert tldrs_for(session, [first], "zh")[first].text == "一个更快的内核。"
        assert without_tldr(session, [third, first, second], "en") == [third, second]
        assert without_tldr(session, [first, second], "de") == [first, second]


def test_a_tldr_goes_with_its_entry(factory: sessionmaker[Session]) -> None:
    (entry,) = _entries(factory, 1)
    with factory() as session, session.begin():
        save_tldr(session, entry, Tldr("A faster kernel.", "en", "m", NOW))
    with factory() as session, session.begin():
        session.execute(delete(Entry).where(Entry.id == entry))
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(EntryTldrRow)) == 0


def test_readers_are_counted_by_the_language_they_chose(factory: sessionmaker[Session], tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    people = [clean_fields(f"r{n}@example.org") for n in range(4)]
    save(factory, settings, people, NOW)
    with factory() as session, session.begin():
        ids = list(session.scalars(select(SubscriberRow.id).order_by(SubscriberRow.id)))
        set_language(session, ids[0], "zh", NOW)
        set_language(session, ids[1], "de", NOW)
    with factory() as session:
        assert sorted(reader_filters(session, "en")) == [("*", "de", 1), ("*", "en", 2), ("*", "zh", 1)]


def test_a_days_spending_adds_up(factory: sessionmaker[Session]) -> None:
    day = date(2026, 6, 14)
    with factory() as session, session.begin():
        assert spent_on(session, day) == (0, 0)
        add_spending(session, day, 3, 300)
    with factory() as session, session.begin():
        add_spending(session, day, 2, 50)
    with factory() as session:
        assert spent_on(session, day) == (5, 350) and spent_on(session, date(2026, 6, 15)) == (0, 0)
