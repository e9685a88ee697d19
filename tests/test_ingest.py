"""Ingest service against a real store: the seed scenario, duplicates, bad files, look-up plans."""

from __future__ import annotations

import os
import re
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.domain import SourceStatus
from bot.ingest.storing import ingest_bytes, ingest_file
from bot.store.entries import refresh_statistics
from bot.store.entry_reads import appearances_of, find_entry, list_entries
from bot.store.schema import Entry, Source
from bot.store.sources import list_sources
from tests.conftest import copy_aged
from tests.helpers import dump_text, render_dump
from tests.seed_facts import ALL_TITLES, DUMP_TITLES, MINIMAX, NEW_PER_DUMP
from tests.store_snapshot import snapshot


def test_seed_dumps_in_order_yield_16_entries_and_5_2_9_0_new(
    factory: sessionmaker[Session], seed_files: list[Path]
) -> None:
    results = [ingest_file(factory, p) for p in seed_files]
    assert [r.status for r in results] == [SourceStatus.INGESTED] * 4
    assert [r.new for r in results] == NEW_PER_DUMP
    assert [r.entries for r in results] == [len(t) for t in DUMP_TITLES]
    with factory() as s:
        entries = list_entries(s)
    assert len(entries) == 16
    assert {e.content.title for e in entries} == ALL_TITLES


def test_minimax_is_one_entry_with_both_summary_variants(
    factory: sessionmaker[Session], seed_files: list[Path]
) -> None:
    for p in seed_files:
        ingest_file(factory, p)
    with factory() as s:
        (minimax,) = [e for e in list_entries(s) if e.content.title == MINIMAX]
        variants = [a.summary for a in appearances_of(s, minimax.id)]
    assert len(variants) == 3  # dumps 000, 002, 003
    assert variants[0].startswith("The problem is that quadratic-cost softmax attention")
    assert variants[1].startswith("Ultra-long-context capability is becoming indispensable")
    assert len(set(variants)) == 2
    assert minimax.tags == ("AI", "GPU", "LLM")  # from dump 003's header


def test_same_bytes_again_or_renamed_copy_is_a_duplicate(
    factory: sessionmaker[Session], seed_files: list[Path], dump_dir: Path
) -> None:
    first = ingest_file(factory, seed_files[0])
    before = snapshot(factory)
    again = ingest_file(factory, seed_files[0])
    copy = copy_aged(seed_files[0], dump_dir, "renamed.txt")
    os.utime(copy)  # touched, too
    renamed = ingest_file(factory, copy)
    for result in (again, renamed):
        assert result.status is SourceStatus.DUPLICATE
        assert (result.new, result.duplicate_of) == (0, first.source_id)
    assert snapshot(factory) == before
    with factory() as s:
        assert [src.status for src in list_sources(s)] == [
            SourceStatus.INGESTED,
            SourceStatus.DUPLICATE,
            SourceStatus.DUPLICATE,
        ]


def test_a_bad_file_changes_nothing_stored(
    factory: sessionmaker[Session], seed_files: list[Path], dump_dir: Path
) -> None:
    ingest_file(factory, seed_files[0])
    before = snapshot(factory)
    # A copy of dump 002 cut before its last link label: 15 good entries, then a truncated one.
    bad = dump_dir / "002-truncated.txt"
    bad.write_bytes(seed_files[2].read_bytes().rsplit(b"\n\n", 1)[0])
    result = ingest_file(factory, bad)
    assert result.status is SourceStatus.FAILED
    assert result.error is not None and result.error.startswith(f"{bad}:")
    assert "is truncated: expected link label PDF or Code" in result.error
    assert snapshot(factory) == before
    with factory() as s:
        failed = list_sources(s, status=SourceStatus.FAILED)
    assert [(f.path, f.error) for f in failed] == [(str(bad), result.error)]


def test_title_variants_are_one_entry(factory: sessionmaker[Session]) -> None:
    a = render_dump([("GF-DiT: Scheduling Parallelism", ["A"], date(2026, 1, 1), "One.")])
    b = render_dump([("gf dit  scheduling parallelism!", ["A"], date(2026, 1, 1), "Two.")])
    assert ingest_bytes(factory, a.encode(), name="a").new == 1
    result = ingest_bytes(factory, b.encode(), name="b")
    assert (result.new, result.updated) == (0, 1)
    with factory() as s:
        assert s.scalar(select(func.count()).select_from(Entry)) == 1


def test_same_entry_twice_in_one_dump_is_one_entry(factory: sessionmaker[Session]) -> None:
    text = render_dump([("Twice", ["A"], date(2026, 1, 1), "One."), ("TWICE", ["A"], date(2026, 1, 1), "Two.")])
    result = ingest_bytes(factory, text.encode(), name="twice")
    assert (result.entries, result.new) == (1, 1)


def test_repositories_match_case_insensitively(factory: sessionmaker[Session]) -> None:
    repo = "{name}\n\nLMCache 2026-06-14 8,985 Python\n\nA cache.\n\nCode"
    assert ingest_bytes(factory, repo.format(name="LMCache/LMCache").encode(), name="1").new == 1
    assert ingest_bytes(factory, repo.format(name="lmcache/LMCACHE").encode(), name="2").new == 0
    with factory() as s:
        entry = find_entry(s, "repo:lmcache/lmcache")
    assert entry is not None and entry.content.links == ("https://github.com/LMCache/LMCache",)


# --- property: ingesting any sequence twice equals ingesting it once ---------

_POOL = [f"Paper number {n}" for n in range(12)]
_variant = st.sampled_from([str, str.upper, str.lower, lambda t: t.replace(" ", "  ") + "."])
_item = st.tuples(st.integers(0, len(_POOL) - 1), _variant, st.sampled_from(["Short.", "A longer summary."]))


@given(st.lists(st.lists(_item, min_size=1, max_size=6), min_size=1, max_size=5))
@pytest.mark.slow
def test_ingesting_twice_equals_ingesting_once(tmp_path_factory, dumps) -> None:
    from bot.store.engine import make_engine, sessions, upgrade

    db = tmp_path_factory.mktemp("prop") / "store.sqlite3"
    engine = make_engine(f"sqlite:///{db}")
    upgrade(engine)
    factory = sessions(engine)
    texts = [
        render_dump([(variant(_POOL[i]), ["Someone"], date(2026, 6, 14), summary) for i, variant, summary in dump])
        for dump in dumps
    ]
    for n, text in enumerate(texts):
        ingest_bytes(factory, text.encode(), name=f"d{n}")
    once = snapshot(factory)
    second = [ingest_bytes(factory, text.encode(), name=f"again{n}") for n, text in enumerate(texts)]
    assert snapshot(factory) == once
    assert all(r.status is SourceStatus.DUPLICATE for r in second)
    # Independently of the code: the distinct pool items used.
    assert len(once["entries"]) == len({i for dump in dumps for i, _, _ in dump})
    with factory() as s:
        total_new = s.scalar(select(func.sum(Source.new_count)))
    assert total_new == len(once["entries"])
    engine.dispose()


def test_the_garbage_collector_is_on_again_after_every_ingest(
    factory: sessionmaker[Session], seed_files: list[Path]
) -> None:
    """Ingest pauses the cyclic collector for its own allocations only: after a good
    file, a bad file and an internal error the process collects garbage as before."""
    import gc

    assert gc.isenabled()
    ingest_file(factory, seed_files[0])
    assert gc.isenabled()
    assert ingest_bytes(factory, b"\xff\xfe not a dump", name="bad.txt").status is SourceStatus.FAILED
    assert gc.isenabled()
    with pytest.raises(TypeError):
        ingest_bytes(factory, "text, not bytes", name="wrong-type.txt")
    assert gc.isenabled()
    gc.disable()
    try:
        ingest_file(factory, seed_files[1])
        assert not gc.isenabled(), "a caller's own pause is left alone"
    finally:
        gc.enable()


def test_title_look_ups_search_their_index_after_a_large_first_ingest(
    engine: Engine, factory: sessionmaker[Session]
) -> None:
    """Right after 2,000 entries went into an empty store, the next ingest finds titles
    through ``ix_entries_title_hash``, not by reading the whole table.  PostgreSQL plans
    that from statistics which autovacuum would only gather a minute or more later, so
    the ingest refreshes them itself (``refresh_statistics``)."""
    assert ingest_bytes(factory, dump_text(2000, seed=1).encode(), name="history").new == 2000
    plans: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def explain(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.startswith("SELECT") and re.search(r"WHERE entries\.title_hash (IN|= ANY)", statement):
            explained = cursor.connection.cursor()
            prefix = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
            explained.execute(prefix + statement, parameters)
            plans.append(" ".join(str(row[-1]) for row in explained.fetchall()))

    assert ingest_bytes(factory, dump_text(100, seed=2, start=2000).encode(), name="next").new == 100
    event.remove(engine, "before_cursor_execute", explain)
    assert plans and all("ix_entries_title_hash" in plan for plan in plans), plans
    # Not again for a batch under a tenth of the store (daily ingests into a big one).
    with factory() as session:
        assert not refresh_statistics(session, 100)
        assert refresh_statistics(session, 300) is (engine.dialect.name == "postgresql")
