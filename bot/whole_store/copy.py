"""Whole-store operations, the copy: the SQLite store into an empty PostgreSQL
database, for outgrowing one machine.

Refused while any digestbot process has the store open, so no unsubscribe acknowledged
meanwhile is lost; pending unsubscribes are applied first; the schema is created at this
digestbot's revision, every table copied in one transaction, sequences set past the
copied ids and row counts compared.  The undo: a copy that stops leaves the target empty
again.  The SQLite store is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.store import engine as store_engine
from bot.store.copies import copy_tables, empty_again, holds_tables
from bot.store.store_errors import StoreError, meaning
from bot.unsubscribes import journal_of
from bot.whole_store.sqlite_store import WholeStoreError, alone, journal_file, sqlite_store

TARGET = "postgresql+psycopg://USER@HOST/DB"


@dataclass(frozen=True, slots=True)
class CopyDone:
    store: Path
    target: str  # as shown: no password
    counts: dict[str, tuple[int, int]]  # table -> (rows read, rows in the copy)


def copy_to_postgresql(
    settings: Settings, opened: Callable[[], tuple[Engine, sessionmaker[Session]]], to: str
) -> CopyDone:
    """The store copied into the empty database at *to*; *opened* opens it (once what was
    asked for is known to be possible)."""
    store = sqlite_store(settings, "copy", "copy a PostgreSQL database with pg_dump and pg_restore")
    try:
        target_url = make_url(to)
    except ArgumentError:
        raise WholeStoreError(f"--to: {to!r} is not a database URL ({TARGET})", usage=True) from None
    if target_url.get_backend_name() != "postgresql":
        raise WholeStoreError(f"--to: {target_url.get_backend_name()} is not PostgreSQL ({TARGET})", usage=True)
    shown = target_url.render_as_string(hide_password=True)
    engine, factory = opened()
    with alone(store, "copying"):
        journal_of(factory).apply_pending(factory)
        target = store_engine.make_engine(to)
        try:
            if store_engine.current_revision(target) is not None or holds_tables(target):
                raise WholeStoreError(
                    f"--to: {shown} is not empty; copy into a new database (createdb) or schema", usage=True
                )
            counts = _copy(engine, journal_file(store), target, shown)
        finally:
            target.dispose()
    return CopyDone(store, shown, counts)


def _copy(engine: Engine, journal_path: Path, target: Engine, shown: str) -> dict[str, tuple[int, int]]:
    try:
        store_engine.upgrade(target)
        journal = store_engine.make_engine(f"sqlite:///{journal_path}") if journal_path.is_file() else None
        try:
            return copy_tables(engine, journal, target, lambda table, rows: None)
        finally:
            if journal is not None:
                journal.dispose()
    except (StoreError, DBAPIError) as exc:
        empty_again(target)
        said = meaning(exc, shown) if isinstance(exc, DBAPIError) else None
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
        raise WholeStoreError(f"--to: copy stopped, nothing kept there: {said or reason}") from None
