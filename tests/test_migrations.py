"""Alembic migrations and the declared models stay the same schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, select

from bot.ingest.identity import key_for_title_hash
from bot.ingest.service import ingest_bytes, ingest_file
from bot.store.engine import HEAD_REVISION, current_revision, downgrade, head_revision, make_engine, sessions, upgrade
from bot.store.schema import Base, Entry
from tests.conftest import FIXTURES


def test_upgraded_database_matches_models(engine: Engine) -> None:
    assert current_revision(engine) == head_revision() == HEAD_REVISION
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_sqlite_connections_use_wal_and_foreign_keys(engine: Engine) -> None:
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    assert {"sources", "entries", "entry_appearances", "tags", "entry_tags", "feeds"} <= set(
        inspect(engine).get_table_names()
    )


def _title_hashes(engine: Engine) -> dict[str, int | None]:
    with engine.connect() as conn:
        return dict(conn.execute(select(Entry.key, Entry.title_hash)).all())


def test_title_hash_migration_round_trips_and_look_ups_still_match(engine: Engine, seed_files: list[Path]) -> None:
    factory = sessions(engine)
    for path in [*seed_files, FIXTURES / "arxiv_day1.rss", FIXTURES / "journal.atom"]:
        ingest_file(factory, path)
    stored = _title_hashes(engine)
    # Dump papers are keyed by their title: no second index entry; repos never by title.
    assert {k for k, h in stored.items() if h is None} == {k for k in stored if k.startswith(("paper:", "repo:"))}
    assert all(h is not None for k, h in stored.items() if k.startswith(("arxiv:", "doi:")))

    downgrade(engine, "0003")
    old = _title_hashes(engine)
    assert all(isinstance(h, int) for h in old.values())
    assert all(h == old[k] for k, h in stored.items() if h is not None)
    assert all(key_for_title_hash(old[k]) == k for k in stored if k.startswith("paper:"))

    upgrade(engine)
    assert _title_hashes(engine) == stored
    again = [ingest_bytes(factory, path.read_bytes() + b"\n", name=f"again-{path.name}") for path in seed_files]
    assert [r.new for r in again] == [0, 0, 0, 0]


def test_a_database_never_migrated_has_no_revision(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.sqlite3'}")
    assert current_revision(engine) is None
    upgrade(engine, "0007")
    assert current_revision(engine) == "0007"
    engine.dispose()
