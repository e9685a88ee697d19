"""Store: copies of the whole store: a SQLite backup (one file, the unsubscribe journal
in it), its restore, and the copy of a SQLite store into PostgreSQL.

SQL only.  A restore never undoes what the store it replaces recorded since the backup
was taken: what was sent (digests, their bodies, the entries they carried),
unsubscribes, bounces and purges.  Never deletes the store it replaces: it is
moved aside, beside it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import Connection, Engine, Table, func, insert, select, text

from bot.domain import SubscriberStatus
from bot.store.base import Base
from bot.store.errors import StoreError

JOURNAL_TABLE = "unsubscribe_requests"
_IN_FLIGHT = "('" + "', '".join(sorted({"queued", "sending", "retry_wait"})) + "')"
_STAYS_OFF = (SubscriberStatus.UNSUBSCRIBED.value, SubscriberStatus.BOUNCED.value)
# What the replaced store recorded that a restore carries forward, in the order their keys need.
_CATALOGUE = ("sources", "entries", "entry_appearances", "tags", "entry_tags")
COPY_CHUNK = 5_000


@dataclass(frozen=True, slots=True)
class BackupFacts:
    revision: str
    tables: dict[str, int]  # rows per table
    size: int  # bytes


@dataclass
class RestoreReport:
    revision: str
    aside: Path | None  # where the replaced store was moved
    carried: bool  # False: there was no readable store to carry the record of sends from
    digests_carried: int = 0
    statuses_kept: int = 0  # unsubscribed or bounced since the backup: still so
    purged_again: int = 0
    in_flight_failed: list[int] = field(default_factory=list)  # without a live store: may have gone out
    requests_to_apply: int = 0  # unsubscribe requests the restored store had not applied


def _columns(table: str) -> list[str]:
    return [column.name for column in Base.metadata.tables[table].columns]


def _column_list(table: str, prefix: str = "") -> str:
    return ", ".join(f"{prefix}{name}" for name in _columns(table))


def _read_only(path: Path) -> str:
    """A URI opening *path* read-only (percent-encoded: any file name)."""
    return f"{path.resolve().as_uri()}?mode=ro"


def _connect(path: Path) -> sqlite3.Connection:
    """A connection whose ATTACH takes URIs (``_read_only``), whatever SQLite was built with."""
    return sqlite3.connect(path.resolve().as_uri(), uri=True, timeout=30)


def _revision(connection: sqlite3.Connection, where: str) -> str:
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{where}: not a digestbot store ({exc})") from None
    if row is None:
        raise StoreError(f"{where}: not a digestbot store (no schema revision)")
    return str(row[0])


def _checked(connection: sqlite3.Connection, where: str) -> None:
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
    partial = dest.with_name(dest.name + ".partial")
    partial.unlink(missing_ok=True)
    try:
        with closing(sqlite3.connect(store, timeout=30)) as source, closing(_connect(partial)) as out:
            revision = _revision(source, str(store))
            source.backup(out)
            out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            if journal is not None and journal.exists():
                out.execute("ATTACH DATABASE ? AS journal", (_read_only(journal),))
                with out:
                    out.execute(f"DELETE FROM main.{JOURNAL_TABLE}")
                    columns = _column_list(JOURNAL_TABLE)
                    out.execute(
                        f"INSERT INTO main.{JOURNAL_TABLE} ({columns}) SELECT {columns} FROM journal.{JOURNAL_TABLE}"
                    )
                out.execute("DETACH DATABASE journal")
            _checked(out, str(partial))
            counts = row_counts(out)
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return BackupFacts(revision, counts, dest.stat().st_size)


def backup_revision(backup: Path) -> str:
    """The schema revision of a backup file, after checking it is whole."""
    if not backup.is_file():
        raise StoreError(f"{backup}: no such file")
    with closing(sqlite3.connect(_read_only(backup), uri=True)) as connection:
        _checked(connection, str(backup))
        return _revision(connection, str(backup))


def _readable(store: Path) -> bool:
    try:
        with closing(sqlite3.connect(store, timeout=30)) as connection:
            _checked(connection, str(store))
            _revision(connection, str(store))
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except (StoreError, sqlite3.DatabaseError):
        return False
    return True


def _move_aside(store: Path, stamp: str) -> Path:
    aside = store.with_name(f"{store.name}.before-restore-{stamp}")
    for suffix in ("", "-wal", "-shm"):  # a store's WAL belongs to it: never left for the new file
        part = Path(f"{store}{suffix}")
        if part.exists():
            os.replace(part, f"{aside}{suffix}")
    return aside


def place_backup(backup: Path, store: Path, now: datetime) -> tuple[Path | None, bool]:
    """Put a copy of *backup* where *store* is; the old store moved aside (its path) and
    whether it could be read (so its record of sends can be carried forward)."""
    live = store.exists() and _readable(store)
    aside = _move_aside(store, now.strftime("%Y%m%dT%H%M%SZ")) if store.exists() else None
    partial = store.with_name(store.name + ".partial")
    with (
        closing(sqlite3.connect(_read_only(backup), uri=True)) as source,
        closing(_connect(partial)) as out,
    ):
        source.backup(out)
    os.replace(partial, store)
    return aside, live


def put_back(store: Path, aside: Path | None, now: datetime) -> Path | None:
    """Undo ``place_backup``: the replaced store back in its place; the half-restored
    one kept beside it (its path), for a look at what went wrong."""
    if aside is None:
        return None
    failed = store.with_name(f"{store.name}.failed-restore-{now.strftime('%Y%m%dT%H%M%SZ')}")
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{store}{suffix}").exists():
            os.replace(f"{store}{suffix}", f"{failed}{suffix}")
        if Path(f"{aside}{suffix}").exists():
            os.replace(f"{aside}{suffix}", f"{store}{suffix}")
    return failed


def carry_forward(store: Path, aside: Path, report: RestoreReport) -> None:
    """What the replaced store (*aside*) recorded since the backup, into the restored one.

    For every digest the replaced store knows, its row and body win (it is newer),
    with the entries and sources they name and the revisions it told.  Subscribers unsubscribed or
    bounced there stay so, and those purged there (ids it gave out, gone from it) are
    purged again.  Subscribers added since the backup are not brought back: they are
    in the replaced store, which stays beside this one."""
    with closing(_connect(store)) as connection:
        connection.execute("PRAGMA foreign_keys=OFF")
        connection.execute("ATTACH DATABASE ? AS live", (_read_only(aside),))
        with connection:
            report.digests_carried = _carry_sends(connection)
            report.statuses_kept = _carry_subscriber_facts(connection)
        gone = (
            "SELECT id FROM main.subscribers WHERE id <= (SELECT coalesce(max(id), 0) FROM live.subscribers) "
            "AND id NOT IN (SELECT id FROM live.subscribers)"
        )
        purged = [row[0] for row in connection.execute(gone)]
        connection.execute("DETACH DATABASE live")
        connection.execute("PRAGMA foreign_keys=ON")
        with connection:
            for subscriber_id in purged:
                _purge(connection, subscriber_id)
        report.purged_again = len(purged)
        problems = connection.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise StoreError(f"{store}: the restored store has rows that name missing rows: {problems[:3]}")


def _carry_sends(connection: sqlite3.Connection) -> int:
    """The replaced store's digests (of subscribers the backup has), their bodies, the
    revisions told them, and the catalogue rows they name; how many digests."""
    for table in _CATALOGUE:
        columns = _column_list(table)
        connection.execute(f"INSERT OR IGNORE INTO main.{table} ({columns}) SELECT {columns} FROM live.{table}")
    known = "SELECT id FROM main.subscribers"
    carried = f"SELECT id FROM live.digests WHERE subscriber_id IN ({known})"
    connection.execute(f"DELETE FROM main.digests WHERE id IN ({carried})")
    columns = _column_list("digests")
    count = connection.execute(
        f"INSERT INTO main.digests ({columns}) SELECT {columns} FROM live.digests WHERE subscriber_id IN ({known})"
    ).rowcount
    columns = _column_list("body_items")
    connection.execute(f"INSERT OR IGNORE INTO main.body_items ({columns}) SELECT {columns} FROM live.body_items")
    columns = _column_list("revision_notices")
    connection.execute(
        f"INSERT OR REPLACE INTO main.revision_notices ({columns}) SELECT {columns} FROM live.revision_notices "
        f"WHERE subscriber_id IN ({known})"
    )
    return int(count)


def _carry_subscriber_facts(connection: sqlite3.Connection) -> int:
    """Watermarks and bounce counts from the replaced store; its unsubscribed and
    bounced readers stay so (how many changed back); its applied requests."""
    connection.execute(
        "UPDATE main.subscribers SET (planned_through, planned_key, bounces) = "
        "(SELECT l.planned_through, l.planned_key, l.bounces FROM live.subscribers l "
        "WHERE l.id = main.subscribers.id) WHERE id IN (SELECT id FROM live.subscribers)"
    )
    off = ", ".join(f"'{status}'" for status in _STAYS_OFF)
    kept = connection.execute(
        "UPDATE main.subscribers SET status = (SELECT l.status FROM live.subscribers l "
        f"WHERE l.id = main.subscribers.id) WHERE status NOT IN ({off}) AND id IN "
        f"(SELECT id FROM live.subscribers WHERE status IN ({off}))"
    ).rowcount
    columns = _column_list("applied_unsubscribes")
    connection.execute(
        f"INSERT OR IGNORE INTO main.applied_unsubscribes ({columns}) SELECT {columns} FROM live.applied_unsubscribes"
    )
    return int(kept)


def _purge(connection: sqlite3.Connection, subscriber_id: int) -> None:
    """As ``subscribers remove --purge`` did: the reader, what refers to them (foreign
    keys on), and the bodies no other digest shows."""
    keys = [
        row[0]
        for row in connection.execute(
            "SELECT DISTINCT body_key FROM digests WHERE subscriber_id = ? AND body_key IS NOT NULL", (subscriber_id,)
        )
    ]
    connection.execute("DELETE FROM subscribers WHERE id = ?", (subscriber_id,))
    for key in keys:
        connection.execute(
            "DELETE FROM body_items WHERE body_key = ? AND NOT EXISTS (SELECT 1 FROM digests WHERE body_key = ?)",
            (key, key),
        )


def settle_in_flight(store: Path, report: RestoreReport, note: str) -> None:
    """Without the replaced store, a digest on its way when the backup was taken may
    have gone out since: recorded failed (a resend sends it), never sent again by itself."""
    with closing(sqlite3.connect(store, timeout=30)) as connection, connection:
        report.in_flight_failed = [
            row[0] for row in connection.execute(f"SELECT id FROM digests WHERE state IN {_IN_FLIGHT} ORDER BY id")
        ]
        connection.execute(
            f"UPDATE digests SET state = 'failed', lease_owner = NULL, lease_expires_at = NULL, last_error = ? "
            f"WHERE state IN {_IN_FLIGHT}",
            (note,),
        )


def journal_from_backup(store: Path, journal: Path | None, report: RestoreReport) -> None:
    """The backup's unsubscribe requests go back into the journal file (those received
    since stay there), and every request the restored store has not applied is
    pending again, so the next start applies it."""
    if journal is None:
        return
    with closing(sqlite3.connect(journal, timeout=30)) as connection:
        connection.execute(
            f"CREATE TABLE IF NOT EXISTS {JOURNAL_TABLE} (id VARCHAR(32) NOT NULL PRIMARY KEY, "
            "subscriber_id INTEGER NOT NULL, received_at DATETIME NOT NULL, applied BOOLEAN NOT NULL)"
        )
        connection.execute("ATTACH DATABASE ? AS restored", (str(store),))
        with connection:
            columns = _column_list(JOURNAL_TABLE)
            connection.execute(
                f"INSERT OR IGNORE INTO main.{JOURNAL_TABLE} ({columns}) SELECT {columns} FROM restored.{JOURNAL_TABLE}"
            )
            connection.execute(f"DELETE FROM restored.{JOURNAL_TABLE}")
            connection.execute(
                f"UPDATE main.{JOURNAL_TABLE} SET applied = "
                f"(id IN (SELECT request_id FROM restored.applied_unsubscribes))"
            )
            report.requests_to_apply = connection.execute(
                f"SELECT count(*) FROM main.{JOURNAL_TABLE} WHERE NOT applied"
            ).fetchone()[0]
        connection.execute("DETACH DATABASE restored")


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
            if table.name == JOURNAL_TABLE and journal is not None:
                with journal.connect() as journal_reading:
                    rows = [dict(row) for row in journal_reading.execute(select(table)).mappings()]
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
