"""The whole-store services (bot.whole_store): backup, restore and copy called as the
``db`` commands call them, refusals as usage errors, and each one's undo: a restore
that stops after the swap puts the store back, a copy that stops leaves its target
empty.  (tests/test_store_operations.py drives the same through the command line,
against every process that may hold the store.)"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect

from bot.config import Settings
from bot.store.engine import make_engine, sessions, upgrade
from bot.store.store_holders import release_all
from bot.whole_store.backup import back_up
from bot.whole_store.copy import copy_to_postgresql
from bot.whole_store.restore import restore
from bot.whole_store.sqlite_store import WholeStoreError
from tests.conftest import PG_SKIP, PG_URL
from tests.helpers import postgres_schema, settings_for

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Settings, Path, Engine]]:
    """A SQLite store with two readers; every hold this process took let go after."""
    path = tmp_path / "var" / "store.sqlite3"
    settings = settings_for(tmp_path, database={"url": f"sqlite:///{path}"}, web={"signing_key": "k" * 32})
    path.parent.mkdir(parents=True)
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    with engine.begin() as connection:
        for n, email in enumerate(("ada@example.org", "grace@example.org"), start=1):
            connection.exec_driver_sql(
                "INSERT INTO subscribers (id, email, email_key, name, filter, timezone, send_hour, status, backfill, "
                "unsubscribe_secret, bounces, created_at, updated_at) VALUES "
                f"({n}, '{email}', '{email}', 'R', '*', 'UTC', 7, 'active', '7d', 's{n}', 0, "
                "'2026-01-01', '2026-01-01')"
            )
    try:
        yield settings, path, engine
    finally:
        engine.dispose()
        release_all()


def statuses(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as connection:
        return dict(connection.execute("SELECT email, status FROM subscribers ORDER BY id").fetchall())


def test_a_backup_restored_keeps_what_the_store_recorded_since(store: tuple[Settings, Path, Engine]) -> None:
    settings, path, engine = store
    file = path.with_name("backup.sqlite3")
    done = back_up(settings, file)
    assert done.facts.tables["subscribers"] == 2 and file.is_file()
    with engine.begin() as connection:  # after the backup: an unsubscribe
        connection.exec_driver_sql("UPDATE subscribers SET status = 'unsubscribed' WHERE id = 2")
    engine.dispose()
    release_all()
    restored = restore(settings, file, now=NOW)
    assert restored.report.aside is not None and restored.report.aside.is_file()
    assert statuses(path) == {"ada@example.org": "active", "grace@example.org": "unsubscribed"}


def test_a_backup_is_refused_over_the_stores_own_files_or_an_existing_one(
    store: tuple[Settings, Path, Engine],
) -> None:
    settings, path, _ = store
    for target in (path, Path(f"{path}-wal"), path.with_name("store-unsubscribes.sqlite3")):
        with pytest.raises(WholeStoreError, match="one of the store's own files") as refused:
            back_up(settings, target)
        assert refused.value.usage
    existing = path.with_name("there.sqlite3")
    existing.write_bytes(b"keep me")
    with pytest.raises(WholeStoreError, match="already exists") as refused:
        back_up(settings, existing)
    assert refused.value.usage and existing.read_bytes() == b"keep me"


def test_a_restore_that_stops_after_the_swap_puts_the_store_back(store: tuple[Settings, Path, Engine]) -> None:
    settings, path, engine = store
    file = path.with_name("backup.sqlite3")
    back_up(settings, file)
    with engine.begin() as connection:
        connection.exec_driver_sql("UPDATE subscribers SET name = 'after the backup'")
    engine.dispose()
    release_all()
    before = path.read_bytes()
    journal = path.with_name("store-unsubscribes.sqlite3")
    if journal.exists():
        os.replace(journal, path.with_name("journal.saved"))
    journal.mkdir()  # the journal cannot be opened: the last step fails, after the swap
    with pytest.raises(WholeStoreError) as stopped:
        restore(settings, file, now=NOW)
    said = str(stopped.value)
    assert "is as it was" in said and "the restored copy is at" in said and not stopped.value.usage
    assert path.read_bytes() == before
    assert not [p for p in path.parent.iterdir() if "before-restore" in p.name]


def test_a_backup_that_is_not_one_is_refused_and_the_store_untouched(store: tuple[Settings, Path, Engine]) -> None:
    settings, path, engine = store
    engine.dispose()
    before = path.read_bytes()
    junk = path.with_name("junk.sqlite3")
    junk.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    with pytest.raises(WholeStoreError):
        restore(settings, junk, now=NOW)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("to", "said"),
    [("not a url", "is not a database URL"), ("sqlite:///elsewhere.sqlite3", "sqlite is not PostgreSQL")],
)
def test_a_copy_to_what_is_not_postgresql_is_a_usage_error_before_the_store_is_opened(
    store: tuple[Settings, Path, Engine], to: str, said: str
) -> None:
    settings, _, _ = store

    def never() -> tuple[Engine, object]:
        raise AssertionError("the store was opened")

    with pytest.raises(WholeStoreError, match=said) as refused:
        copy_to_postgresql(settings, never, to)  # type: ignore[arg-type]
    assert refused.value.usage


@PG_SKIP
def test_a_copy_goes_into_an_empty_database_once(store: tuple[Settings, Path, Engine]) -> None:
    settings, _, engine = store
    with postgres_schema(PG_URL) as target:
        done = copy_to_postgresql(settings, lambda: (engine, sessions(engine)), target)
        assert done.counts["subscribers"] == (2, 2) and "@" not in done.target.split("@")[0].split(":")[-1]
        with pytest.raises(WholeStoreError, match="is not empty") as refused:
            copy_to_postgresql(settings, lambda: (engine, sessions(engine)), target)
        assert refused.value.usage
        copied = make_engine(target)
        try:
            assert "subscribers" in inspect(copied).get_table_names()
        finally:
            copied.dispose()


def test_the_zotero_save_asks_journaled_go_with_a_backup_and_come_back_pending(
    store: tuple[Settings, Path, Engine],
) -> None:
    """A "Save to Zotero" the page acknowledged lives in the journal (a file of its own):
    the backup takes it, a restore puts it back pending, and a copy to PostgreSQL keeps it."""
    from bot.unsubscribes import close_journal, journal_of

    settings, path, engine = store
    journal = journal_of(sessions(engine))
    journal.append_saves([(1, 1)], NOW)
    file = path.with_name("backup.sqlite3")
    done = back_up(settings, file)
    assert done.facts.tables["zotero_save_requests"] == 1
    journal.mark_saves_applied([rid for rid, _, _ in journal.pending_saves()])  # taken since
    close_journal(engine.url.render_as_string(hide_password=False))
    engine.dispose()
    release_all()
    restore(settings, file, now=NOW)
    restored = make_engine(f"sqlite:///{path}")
    try:
        assert [(s, e) for _, s, e in journal_of(sessions(restored)).pending_saves()] == [(1, 1)]
    finally:
        close_journal(restored.url.render_as_string(hide_password=False))
        restored.dispose()
