"""Whole-store operations, the backup: a consistent copy of the SQLite store with the
unsubscribe journal in it, while the scheduler, workers and serve run, and the signing
key beside it (``FILE.key``, mode 0600), which its restore needs.

Never writes over one of the store's own files and never replaces a file unasked.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from bot.config import Settings
from bot.store.copies import BackupFacts, backup_sqlite
from bot.store.store_errors import StoreError
from bot.store.store_holders import hold
from bot.tokens import backup_key, key_beside
from bot.whole_store.sqlite_store import WholeStoreError, family, journal_file, sqlite_store


@dataclass(frozen=True, slots=True)
class BackupDone:
    store: Path
    facts: BackupFacts
    key_note: str  # where the signing key went, for the operator


def back_up(settings: Settings, file: Path, *, force: bool = False) -> BackupDone:
    """The store backed up to *file*; ``WholeStoreError`` when it is refused or fails."""
    store = sqlite_store(settings, "backup", f"pg_dump --format=custom --file {file} '<database.url>'")
    if not store.is_file():
        raise WholeStoreError(f"{store}: no store here to back up (database.url)", usage=True)
    own = family(settings, store)
    for target in (file, key_beside(file)):
        if target.resolve() in own:
            raise WholeStoreError(
                f"{target}: that is one of the store's own files ({store} and beside it); name a new file", usage=True
            )
    if file.exists() and not force:
        raise WholeStoreError(f"{file}: already exists (--force replaces it)", usage=True)
    if not file.parent.is_dir():
        raise WholeStoreError(f"{file.parent}: no such folder")
    try:
        hold(store)  # no restore or copy meanwhile
        facts = backup_sqlite(store, journal_file(store), file)
        key = backup_key(settings, file)
    except StoreError as exc:
        raise WholeStoreError(str(exc)) from None
    except sqlite3.Error as exc:
        raise WholeStoreError(f"{file}: {exc}") from None
    except OSError as exc:
        raise WholeStoreError(f"{exc.filename or file}: {exc.strerror}") from None
    return BackupDone(store, facts, key)
