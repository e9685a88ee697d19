"""Alembic migrations and the declared models stay the same schema."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect

from bot.store.engine import current_revision, head_revision
from bot.store.schema import Base


def test_upgraded_database_matches_models(engine: Engine) -> None:
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_sqlite_connections_use_wal_and_foreign_keys(engine: Engine) -> None:
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    assert {"sources", "entries", "entry_appearances", "tags", "entry_tags", "feeds"} <= set(inspect(engine).get_table_names())
