"""Store: restoring a SQLite backup, which is untrusted input.

A backup is never put in the store's place as it is.  Its schema is compared with the
one this digestbot's migrations make at the backup's revision (a table, index, trigger
or view they never make is refused, and so is one the backup lacks); its rows are
copied into a store made afresh by those migrations, which is then brought to this
digestbot's schema and given (``carried``) what the store it replaces recorded since
the backup was taken: what was sent (digests, their bodies, the entries they carried),
unsubscribes, bounces and purges.  Only then is it renamed into the store's place, the
replaced store moved aside beside it; until that rename the store is untouched, and
a failure after it puts the store back.  Never deletes the store it replaces.

SQL only (the migrations through ``engine``).
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bot.domain import DigestKind, DigestState
from bot.domain.stored import read_settings
from bot.store.copies import checked, connect, read_only_uri, revision_of
from bot.store.derived_tables import DERIVED_TABLES
from bot.store.engine import HEAD_REVISION, make_engine, revisions, upgrade
from bot.store.store_errors import StoreError
from bot.store.store_files import database_files

SHOWN_READERS = 5
# Columns whose every value digestbot spells itself: a backup holding another was changed.
_WRITTEN_ONLY = (
    ("digests", "state", tuple(state.value for state in DigestState)),
    ("digests", "kind", tuple(kind.value for kind in DigestKind)),
)
# Counts digestbot only ever adds to: whole numbers from zero up (a row "-5 requests" would
# be shown, and would give the day's model budget five requests more).
_COUNTS = (
    ("llm_usage", "day", ("requests", "tokens")),
    ("digests", "id", ("attempts", "entry_count", "pending_count")),
    ("subscribers", "id", ("bounces",)),
)


class BackupRefused(StoreError):
    """The backup is not one this digestbot wrote, as it wrote it (one line); *newer*:
    a newer digestbot's, which is a usage error."""

    def __init__(self, message: str, *, newer: bool = False) -> None:
        super().__init__(message)
        self.newer = newer


@dataclass
class RestoreReport:
    revision: str
    aside: Path | None = None  # where the replaced store was moved
    carried: bool = False  # False: there was no readable store to carry the record of sends from
    digests_carried: int = 0
    statuses_kept: int = 0  # unsubscribed or bounced since the backup: still so
    purged_again: int = 0
    in_flight_unknown: list[int] = field(default_factory=list)  # without a live store: may have gone out
    requests_to_apply: int = 0  # unsubscribe requests the restored store had not applied
    added_since: list[str] = field(default_factory=list)  # readers the backup does not have
    changed_since: list[str] = field(default_factory=list)  # readers whose settings are as at the backup again


def backup_revision(backup: Path) -> str:
    """The schema revision of a backup file, after checking it is whole and a revision
    of this digestbot's migrations (as Alembic's graph knows them, not as text)."""
    if not backup.is_file():
        raise StoreError(f"{backup}: no such file")
    with closing(sqlite3.connect(read_only_uri(backup), uri=True)) as connection:
        connection.execute("PRAGMA trusted_schema=OFF")
        checked(connection, str(backup))
        revision = revision_of(connection, str(backup))
        try:
            rows = connection.execute("SELECT count(*) FROM alembic_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{backup}: not a digestbot store ({exc})") from None
    if rows != 1:
        raise BackupRefused(f"{backup}: it names {rows} schema revisions; a digestbot store names one")
    if revision in revisions():
        return revision
    if re.fullmatch(r"\d{4}", revision) and revision > HEAD_REVISION:
        raise BackupRefused(
            f"{backup}: its schema is {revision}, newer than this digestbot's {HEAD_REVISION}", newer=True
        )
    raise BackupRefused(
        f"{backup}: its schema is {revision!r}, which no digestbot migration makes (this one's are 0001 to "
        f"{HEAD_REVISION}); not a backup digestbot wrote"
    )


def rebuild(
    backup: Path, partial: Path, revision: str, *, filter_fault: Callable[[object], str | None] | None = None
) -> None:
    """*partial*: a store made afresh by the migrations at *revision*, holding the
    backup's rows (nothing of its schema), then brought to this digestbot's schema.
    *partial* is a new empty file its caller created exclusively (``bot.files``).
    A subscriber's setting that digestbot never writes refuses the backup (*filter_fault*:
    why a stored filter cannot be used, from the stage that reads filters)."""
    made = make_engine(f"sqlite:///{partial}")
    try:
        upgrade(made, revision)
    finally:
        made.dispose()
    with closing(connect(partial)) as connection:
        connection.execute("PRAGMA foreign_keys=OFF")
        connection.execute("ATTACH DATABASE ? AS backup", (read_only_uri(backup),))
        tables = _same_schema(connection, backup, revision)
        with connection:
            for table, columns in tables.items():
                if table in DERIVED_TABLES:
                    continue  # made again from the rest by the next pass, never taken from a backup
                names = ", ".join(f'"{name}"' for name in columns)
                connection.execute(f'INSERT INTO main."{table}" ({names}) SELECT {names} FROM backup."{table}"')
        connection.execute("DETACH DATABASE backup")
        problems = connection.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            table, row, parent = problems[0][:3]
            raise BackupRefused(f"{backup}: {len(problems)} rows name missing rows (row {row} of {table}: {parent})")
    made = make_engine(f"sqlite:///{partial}")
    try:
        upgrade(made)
    finally:
        made.dispose()
    with closing(connect(partial)) as connection:
        _refuse_unwritten_settings(connection, backup, filter_fault)


def _refuse_unwritten_settings(
    connection: sqlite3.Connection, backup: Path, filter_fault: Callable[[object], str | None] | None
) -> None:
    """``BackupRefused`` naming the first subscriber whose stored settings digestbot
    never writes, and how many there are: restored, one would be held out of planning."""
    bad: list[str] = []
    rows = connection.execute(
        "SELECT id, status, timezone, send_hour, cadence, backfill, taste_threshold, filter FROM main.subscribers"
    )
    for subscriber_id, status, zone, hour, cadence, backfill, threshold, filter_text in rows:
        read = read_settings(
            status=status, timezone=zone, send_hour=hour, cadence=cadence, backfill=backfill, taste_threshold=threshold
        )
        fault = read.fault
        fault = fault or (filter_fault(filter_text) if filter_fault is not None else None)
        if fault is not None:
            bad.append(f"subscriber {subscriber_id}: {fault}")
    for table, column, allowed in _WRITTEN_ONLY:
        listed = ", ".join(f"'{value}'" for value in allowed)
        found = connection.execute(
            f'SELECT id, "{column}" FROM main."{table}" WHERE "{column}" NOT IN ({listed}) LIMIT 1'
        ).fetchone()
        if found is not None:
            bad.append(f"{table} row {found[0]}: {column} {str(found[1])[:40]!r} is not one digestbot writes")
    for table, key, columns in _COUNTS:
        for column in columns:
            found = connection.execute(
                f'SELECT "{key}", "{column}" FROM main."{table}" '
                f'WHERE typeof("{column}") != \'integer\' OR "{column}" < 0 LIMIT 1'
            ).fetchone()
            if found is not None:
                bad.append(f"{table} row {found[0]}: {column} {str(found[1])[:40]!r} is not a count (a whole number)")
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise BackupRefused(f"{backup}: {bad[0]}{more}; digestbot never writes that, so the backup was changed")


def _objects(connection: sqlite3.Connection, schema: str) -> dict[tuple[str, str], str]:
    """(type, name) -> the table it belongs to, of every object of *schema* but SQLite's
    own tables and indexes (``sqlite_sequence``, ``sqlite_stat1``, ``sqlite_autoindex_*``)."""
    rows = connection.execute(f"SELECT type, name, tbl_name FROM {schema}.sqlite_master")
    return {
        (kind, name): table
        for kind, name, table in rows
        if not (kind in ("table", "index") and name.startswith("sqlite_"))
    }


def _same_schema(connection: sqlite3.Connection, backup: Path, revision: str) -> dict[str, list[str]]:
    """The tables to copy, with their columns, once the attached backup is found to hold
    exactly what the migrations made at *revision* (in ``main``); ``BackupRefused``
    naming the first difference otherwise."""
    ours, theirs = _objects(connection, "main"), _objects(connection, "backup")
    for (kind, name), table in sorted(theirs.items()):
        if ours.get((kind, name)) != table:
            on = f" on {table!r}" if kind in ("index", "trigger") else ""
            raise BackupRefused(
                f"{backup}: it holds a {kind} {name!r}{on} that digestbot's schema {revision} does not have; "
                "a backup is restored only as digestbot writes one"
            )
    missing = sorted(set(ours) - set(theirs), key=lambda object_: (object_[0] != "table", object_))
    if missing:
        kind, name = missing[0]
        raise BackupRefused(f"{backup}: it has no {kind} {name!r}, which schema {revision} has; not a whole backup")
    tables: dict[str, list[str]] = {}
    for kind, name in sorted(ours):
        if kind != "table" or name == "alembic_version":
            continue
        columns = _columns(connection, "main", name)
        if _columns(connection, "backup", name) != columns:
            raise BackupRefused(f"{backup}: its table {name!r} has other columns than digestbot makes")
        tables[name] = [column for column, hidden in columns if not hidden]
    return tables


def _columns(connection: sqlite3.Connection, schema: str, table: str) -> list[tuple[str, int]]:
    """(name, hidden) of every column, generated ones included (``table_xinfo``)."""
    return [(row[1], row[6]) for row in connection.execute(f'PRAGMA {schema}.table_xinfo("{table}")')]


def readable(store: Path) -> bool:
    """Whether *store* can be read as a store (its WAL checkpointed into it if so)."""
    try:
        with closing(sqlite3.connect(store, timeout=30)) as connection:
            checked(connection, str(store))
            revision_of(connection, str(store))
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except (StoreError, sqlite3.DatabaseError):
        return False
    return True


def is_current(store: Path) -> bool:
    """Whether *store* is at this digestbot's schema (what carrying forward reads)."""
    with closing(sqlite3.connect(read_only_uri(store), uri=True)) as connection:
        return revision_of(connection, str(store)) == HEAD_REVISION


def read_fact(store: Path, name: str) -> str | None:
    """What *store* knows under *name* (``store_facts``), read without opening it for writing."""
    with closing(sqlite3.connect(read_only_uri(store), uri=True)) as connection:
        row = connection.execute("SELECT value FROM store_facts WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


def remove(store: Path) -> None:
    for part in database_files(store):
        part.unlink(missing_ok=True)


def _move(source: Path, target: Path) -> None:
    for part, to in zip(database_files(source), database_files(target), strict=True):
        if part.exists():
            os.replace(part, to)


def put_in_place(partial: Path, store: Path, now: datetime) -> Path | None:
    """*partial* where *store* is; the replaced store moved aside (its path, None when
    there was none)."""
    with closing(sqlite3.connect(partial, timeout=30)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the one file renamed
    aside = None
    if store.exists():
        aside = store.with_name(f"{store.name}.before-restore-{now.strftime('%Y%m%dT%H%M%SZ')}")
        _move(store, aside)
    _move(partial, store)
    return aside


def put_back(store: Path, aside: Path | None, now: datetime) -> Path | None:
    """Undo ``put_in_place``: the replaced store back in its place; the restored one
    kept beside it (its path), for a look at what went wrong."""
    if aside is None:
        return None
    failed = store.with_name(f"{store.name}.failed-restore-{now.strftime('%Y%m%dT%H%M%SZ')}")
    _move(store, failed)
    _move(aside, store)
    return failed
