"""Store: copies of the whole store: a SQLite backup (one file, the unsubscribe journal
in it) and the copy of a SQLite store into PostgreSQL (a backup's restore is in
``restores``).

SQL only.  Never changes the store it copies.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, Engine, Table, func, insert, inspect, select, text

from bot.files import fresh_file
from bot.store.base import Base
from bot.store.store_errors import StoreError

JOURNAL_TABLE = "unsubscribe_requests"
SAVES_TABLE = "zotero_save_requests"  # the journal's other table ("Save to Zotero" asks)
JOURNAL_TABLES = (JOURNAL_TABLE, SAVES_TABLE)
COPY_CHUNK = 5_000


@dataclass(frozen=True, slots=True)
class BackupFacts:
    revision: str
    tables: dict[str, int]  # rows per table
    size: int  # bytes


def column_list(table: str) -> str:
    return ", ".join(column.name for column in Base.metadata.tables[table].columns)


def read_only_uri(path: Path) -> str:
    """A URI opening *path* read-only (percent-encoded: any file name)."""
    return f"{path.resolve().as_uri()}?mode=ro"


def connect(path: Path) -> sqlite3.Connection:
    """A connection whose ATTACH takes URIs (``read_only_uri``), whatever SQLite was
    built with; the schema of a database it attaches is never trusted to run a function
    (a trigger, view or default of a backup's)."""
    connection = sqlite3.connect(path.resolve().as_uri(), uri=True, timeout=30)
    connection.execute("PRAGMA trusted_schema=OFF")
    return connection


def revision_of(connection: sqlite3.Connection, where: str) -> str:
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{where}: not a digestbot store ({exc})") from None
    if row is None:
        raise StoreError(f"{where}: not a digestbot store (no schema revision)")
    return str(row[0])


def checked(connection: sqlite3.Connection, where: str) -> None:
    try:
        result = connection.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{where}: not a SQLite database ({exc})") from None
    if result != "ok":
        raise StoreError(f"{where}: damaged ({result})")


def row_counts(connection: sqlite3.Connection) -> dict[str, int]:
    names = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {
        name: connection.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
        for name in sorted(names)
        if name in Base.metadata.tables
    }


def backup_sqlite(store: Path, journal: Path | None, dest: Path) -> BackupFacts:
    """A consistent copy of *store* taken while others write (SQLite's online backup,
    one step: one snapshot), with the journal's requests in its own table, checked, and
    written under its name only once complete."""
    with fresh_file(dest) as partial:
        with closing(sqlite3.connect(store, timeout=30)) as source, closing(connect(partial)) as out:
            revision = revision_of(source, str(store))
            source.backup(out)
            out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            if journal is not None and journal.exists():
                out.execute("ATTACH DATABASE ? AS journal", (read_only_uri(journal),))
                held = {row[0] for row in out.execute("SELECT name FROM journal.sqlite_master WHERE type = 'table'")}
                with out:
                    for name in JOURNAL_TABLES:
                        if name not in held:  # a journal an older digestbot made, never opened since
                            continue
                        out.execute(f"DELETE FROM main.{name}")
                        columns = column_list(name)
                        out.execute(f"INSERT INTO main.{name} ({columns}) SELECT {columns} FROM journal.{name}")
                out.execute("DETACH DATABASE journal")
            checked(out, str(partial))
            counts = row_counts(out)
    return BackupFacts(revision, counts, dest.stat().st_size)


# --- SQLite to PostgreSQL ---------------------------------------------------------------------


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """One read transaction on the source (the engine begins one on the first
    statement): every table is read as of that statement."""
    with engine.connect() as connection:
        connection.exec_driver_sql("SELECT count(*) FROM alembic_version").scalar()
        yield connection
        connection.rollback()


def copy_tables(
    source: Engine, journal: Engine | None, target: Engine, say: Callable[[str, int], None]
) -> dict[str, tuple[int, int]]:
    """Every table of *source* into the empty, migrated *target*, in one transaction
    there; the journal's requests as the target's own (PostgreSQL keeps them in the
    store).  Sequences are set past the copied ids.  Rows per table, (source, target)."""
    counts: dict[str, tuple[int, int]] = {}
    with _snapshot(source) as reading, target.begin() as writing:
        for table in Base.metadata.sorted_tables:
            if table.name in JOURNAL_TABLES and journal is not None:
                with journal.connect() as journal_reading:
                    kept = inspect(journal_reading).has_table(table.name)
                    rows = [dict(row) for row in journal_reading.execute(select(table)).mappings()] if kept else []
                written = _insert_all(writing, table, iter([rows]))
                counts[table.name] = (len(rows), written)
                continue
            total = reading.execute(select(func.count()).select_from(table)).scalar_one()
            parts = _parts(reading, table)
            written = _insert_all(writing, table, parts)
            counts[table.name] = (total, written)
            say(table.name, written)
        for table in Base.metadata.sorted_tables:
            key = list(table.primary_key.columns)
            if len(key) == 1 and key[0].autoincrement is not False and key[0].type.python_type is int:
                writing.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{table.name}', '{key[0].name}'), "
                        f"coalesce(max({key[0].name}), 1), max({key[0].name}) IS NOT NULL) FROM {table.name}"
                    )
                )
        for table in Base.metadata.sorted_tables:
            there = writing.execute(select(func.count()).select_from(table)).scalar_one()
            if there != counts[table.name][0]:
                raise StoreError(f"{table.name}: {counts[table.name][0]} rows read, {there} in the copy")
            counts[table.name] = (counts[table.name][0], there)
    return counts


def _parts(connection: Connection, table: Table) -> Iterator[list[dict[str, object]]]:
    result = connection.execution_options(yield_per=COPY_CHUNK).execute(select(table)).mappings()
    for part in result.partitions(COPY_CHUNK):
        yield [{name: _without_nul(value) for name, value in row.items()} for row in part]


def _without_nul(value: object) -> object:
    """*value* with no NUL in any of its text: PostgreSQL's text and JSON hold none, and a
    SQLite store written before ingest left them out may have some."""
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    return value


def _insert_all(connection: Connection, table: Table, parts: Iterator[list[dict[str, object]]]) -> int:
    written = 0
    for rows in parts:
        if rows:
            connection.execute(insert(table), rows)
            written += len(rows)
    return written


def holds_tables(engine: Engine) -> bool:
    """Whether the database at *engine* holds any table (a copy goes only into an empty one)."""
    return bool(inspect(engine).get_table_names())


def empty_again(engine: Engine) -> None:
    """Drop what a stopped copy created, so the database is empty as it was; quietly, for
    the copy's own error is the one to report."""
    try:
        with engine.begin() as connection:
            Base.metadata.drop_all(connection)
            connection.execute(text("DROP TABLE IF EXISTS alembic_version"))
    except Exception:  # noqa: BLE001 - see the docstring
        return
