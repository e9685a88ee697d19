"""Whole-store operations, the restore: a backup, untrusted, into a store made afresh,
with what the live store recorded since carried forward, put in the store's place.

Refused while any digestbot process has the store open.  Until the rename into place
the store is untouched; the undo: a failure after it puts the store back (the restored
copy kept aside and named).  FILE.key, the signing key the backup was written with, is
put back when the restored links need it.  Never deletes the store it replaces.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bot.choose.filters import filter_fault
from bot.config import ConfigError, Settings
from bot.files import exclusive_file
from bot.store import restores
from bot.store.carried import carry_forward, journal_from_backup, settle_in_flight
from bot.store.restores import RestoreReport, read_fact
from bot.store.store_errors import StoreError
from bot.tokens import KEY_ID_FACT, restore_key
from bot.whole_store.sqlite_store import WholeStoreError, alone, journal_file, said, sqlite_store


@dataclass(frozen=True, slots=True)
class RestoreDone:
    store: Path
    report: RestoreReport
    key_note: str | None  # what became of the signing key, when there is something to say


def restore(settings: Settings, file: Path, *, now: datetime) -> RestoreDone:
    """The backup *file* in the store's place; ``WholeStoreError`` when it is refused or
    stops (the store then as it was)."""
    store = sqlite_store(settings, "restore", f"pg_restore --clean --if-exists --dbname '<database.url>' {file}")
    store.parent.mkdir(parents=True, exist_ok=True)  # a new machine's var/
    with alone(store, "restoring"):
        try:
            revision = restores.backup_revision(file)
        except restores.BackupRefused as exc:
            raise WholeStoreError(str(exc), usage=exc.newer) from None
        except StoreError as exc:
            raise WholeStoreError(str(exc)) from None
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        report = RestoreReport(revision)
        stopped = f"{file}: restore stopped, {store} is as it was"
        try:
            partial = exclusive_file(store.with_name(f"{store.name}.restore-{stamp}"))
        except OSError as exc:
            raise WholeStoreError(f"{stopped}: {said(exc)}") from None
        try:
            _rebuild(file, store, partial, report)
        except (StoreError, OSError, sqlite3.DatabaseError) as exc:
            restores.remove(partial)
            raise WholeStoreError(f"{stopped}: {said(exc)}") from None
        report.aside = restores.put_in_place(partial, store, now)
        try:
            journal_from_backup(store, journal_file(store), report)
        except (StoreError, OSError, sqlite3.DatabaseError) as exc:
            failed = restores.put_back(store, report.aside, now)
            kept = f"; the restored copy is at {failed}" if failed else ""
            raise WholeStoreError(f"{stopped}: {said(exc)}{kept}") from None
        key = _restore_key(settings, file, store, stamp)
    return RestoreDone(store, report, key)


def _rebuild(file: Path, store: Path, partial: Path, report: RestoreReport) -> None:
    """The backup's rows in a store made afresh at its schema, brought to this one's, with
    what the live store recorded since (or, without one, its digests in flight settled)."""
    restores.rebuild(file, partial, report.revision, filter_fault=filter_fault)
    if store.exists() and restores.readable(store) and restores.is_current(store):
        carry_forward(partial, store, report)
    else:
        note = f"on its way when the backup {file.name} was taken: it may have gone out"
        settle_in_flight(partial, report, note)


def _restore_key(settings: Settings, file: Path, store: Path, stamp: str) -> str | None:
    try:
        return restore_key(settings, file, read_fact(store, KEY_ID_FACT), stamp)
    except (ConfigError, OSError) as exc:
        return f"the signing key was not put back: {said(exc)}"
