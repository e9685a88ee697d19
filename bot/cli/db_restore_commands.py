"""CLI command ``db restore``: a backup, untrusted, into a store made afresh, with what
the live store recorded since carried forward.  A thin shell over
``bot.store.restores``; the store is held alone while it runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.admin import db_app
from bot.cli.context import Context
from bot.cli.db_commands import alone, journal_file, sqlite_store
from bot.cli.output import EXIT_USAGE, fail, out
from bot.cli.shell import ctx_of, now
from bot.domain.text import plural

if TYPE_CHECKING:
    from bot.store.restores import RestoreReport


@db_app.command("restore")
def db_restore(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A backup written by 'digestbot db backup'.", metavar="FILE")],
) -> None:
    """Put a backup in the SQLite store's place; refused while any digestbot process
    (scheduler, worker, serve, another command) has the store open.  A backup is
    untrusted: only the schema digestbot makes is accepted, and its rows are copied
    into a store made afresh.  The store it replaces is moved aside, and what it
    recorded since the backup is kept: digests sent are not sent again, unsubscribes,
    bounces and purges stay; readers it added since are named.  Without a readable
    store to replace, digests on their way in the backup are marked unknown (they may
    have gone out; 'digestbot resend' sends one again).  FILE.key, the signing key
    'db backup' wrote beside it, is put back when the restored links need it."""
    import sqlite3

    from bot.files import exclusive_file
    from bot.store import restores
    from bot.store.carried import journal_from_backup
    from bot.store.store_errors import StoreError

    c = ctx_of(ctx)
    store = sqlite_store(c, "restore", f"pg_restore --clean --if-exists --dbname '<database.url>' {file}")
    store.parent.mkdir(parents=True, exist_ok=True)  # a new machine's var/
    with alone(store, "restoring"):
        try:
            revision = restores.backup_revision(file)
        except restores.BackupRefused as exc:
            fail(str(exc), EXIT_USAGE if exc.newer else 1)
        except StoreError as exc:
            fail(str(exc))
        stamp = now().strftime("%Y%m%dT%H%M%SZ")
        report = restores.RestoreReport(revision)
        try:
            partial = exclusive_file(store.with_name(f"{store.name}.restore-{stamp}"))
        except OSError as exc:
            fail(f"{file}: restore stopped, {store} is as it was: {_said(exc)}")
        try:
            _rebuild(file, store, partial, report)
        except (StoreError, OSError, sqlite3.DatabaseError) as exc:
            restores.remove(partial)
            fail(f"{file}: restore stopped, {store} is as it was: {_said(exc)}")
        report.aside = restores.put_in_place(partial, store, now())
        try:
            journal_from_backup(store, journal_file(store), report)
        except (StoreError, OSError, sqlite3.DatabaseError) as exc:
            failed = restores.put_back(store, report.aside, now())
            kept = f"; the restored copy is at {failed}" if failed else ""
            fail(f"{file}: restore stopped, {store} is as it was: {_said(exc)}{kept}")
        key = _restore_key(c, file, store, stamp)
    _say_restored(store, file, report, key)


def _said(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _rebuild(file: Path, store: Path, partial: Path, report: RestoreReport) -> None:
    """The backup's rows in a store made afresh at its schema, brought to this one's, with
    what the live store recorded since (or, without one, its digests in flight settled)."""
    from bot.choose.filters import filter_fault
    from bot.store import restores
    from bot.store.carried import carry_forward, settle_in_flight

    restores.rebuild(file, partial, report.revision, filter_fault=filter_fault)
    if store.exists() and restores.readable(store) and restores.is_current(store):
        carry_forward(partial, store, report)
    else:
        note = f"on its way when the backup {file.name} was taken: it may have gone out"
        settle_in_flight(partial, report, note)


def _restore_key(c: Context, file: Path, store: Path, stamp: str) -> str | None:
    from bot.config import ConfigError
    from bot.store.restores import read_fact
    from bot.tokens import KEY_ID_FACT, restore_key

    try:
        return restore_key(c.settings, file, read_fact(store, KEY_ID_FACT), stamp)
    except (ConfigError, OSError) as exc:
        return f"the signing key was not put back: {_said(exc)}"


def _say_restored(store: Path, file: Path, report: RestoreReport, key: str | None) -> None:
    out.print(f"restored {file} (schema {report.revision}) into {store}", markup=False)
    if report.aside is not None:
        out.print(f"the store it replaced is kept at {report.aside}", markup=False)
    if report.carried:
        out.print(
            f"kept from it: {plural(report.digests_carried, 'digest')} with what they carried, "
            f"{plural(report.statuses_kept, 'subscriber')} unsubscribed or bounced since, "
            f"{plural(report.purged_again, 'purged subscriber')} purged again",
            markup=False,
        )
        for readers, what in (
            (report.added_since, "added since the backup, not in it"),
            (report.changed_since, "whose settings are as they were at the backup"),
        ):
            if readers:
                shown = ", ".join(readers[:5]) + (", ..." if len(readers) > 5 else "")
                out.print(f"gone since the backup: {plural(len(readers), 'reader')} {what} ({shown})", markup=False)
    elif report.in_flight_unknown:
        shown = ", ".join(f"#{n}" for n in report.in_flight_unknown[:10])
        more = "" if len(report.in_flight_unknown) <= 10 else ", ..."
        out.print(
            f"no store to compare with: {plural(len(report.in_flight_unknown), 'digest')} on its way in the backup "
            f"marked unknown ({shown}{more}): they may have gone out; 'digestbot resend N' (or 'resend --unknown') "
            "sends them again. Digests sent after the backup was taken are not known to it.",
            markup=False,
        )
    if report.requests_to_apply:
        out.print(f"{plural(report.requests_to_apply, 'unsubscribe request')} will be applied on start", markup=False)
    if key:
        out.print(key, markup=False)
