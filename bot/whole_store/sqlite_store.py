"""Whole-store operations, what they share: the SQLite store named by the settings, its
family of files, the store held alone, and the one error every operation raises.

Never prints and never exits: a ``WholeStoreError`` is one line, and says whether it is
the operator's usage (a command's exit 2) or a failure (exit 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import make_url

from bot.config import Settings
from bot.domain.text import one_line
from bot.store.journal import journal_url
from bot.store.store_errors import StoreError
from bot.store.store_files import lock_files, sqlite_files
from bot.store.store_holders import StoreInUse
from bot.store.store_holders import alone as held_alone
from bot.tokens import key_file


class WholeStoreError(Exception):
    """An operation refused or stopped (one line); *usage*: the operator asked for what
    cannot be done, rather than it failing."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def sqlite_store(settings: Settings, operation: str, instead: str) -> Path:
    """The SQLite store's file; a usage error naming what to do *instead* on PostgreSQL."""
    url = make_url(settings.database_url)
    if url.get_backend_name() != "sqlite" or not url.database:
        raise WholeStoreError(
            f"db {operation} works on a SQLite store; database.url is {url.get_backend_name()}: {instead}", usage=True
        )
    return Path(url.database)


def journal_file(store: Path) -> Path:
    """The unsubscribe journal's file beside *store*."""
    return Path(journal_url(f"sqlite:///{store}").removeprefix("sqlite:///"))


def family(settings: Settings, store: Path) -> set[Path]:
    """Every file of the store's (its WAL, shared memory and journal, the unsubscribe
    journal's, the lock files, the signing key), as they resolve: no backup goes there."""
    journal = journal_file(store)
    files = [*sqlite_files(store), *sqlite_files(journal), *lock_files(store)]
    key = key_file(settings)
    return {file.resolve() for file in [*files, *([key] if key else [])]}


@contextmanager
def alone(store: Path, doing: str) -> Iterator[None]:
    """The store held by this process alone (``bot.store.store_holders``): a usage error
    naming the processes that have it open (the scheduler, workers, serve, a command)."""
    try:
        with held_alone(store, doing):
            yield
    except StoreInUse as exc:
        raise WholeStoreError(str(exc), usage=True) from None
    except StoreError as exc:
        raise WholeStoreError(str(exc)) from None


def said(exc: BaseException) -> str:
    """An exception's message on one line (``one_line``), cut to what a line holds."""
    return one_line(str(exc))[:300]
