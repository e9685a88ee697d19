"""CLI commands on the store as a whole: ``db prune`` (retention, now), ``db backup``,
``db restore`` and ``db copy``.  Thin shells over ``bot.plan.retention`` and
``bot.store.copies``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from bot.cli.admin import db_app
from bot.cli.shell import EXIT_USAGE, Context, JsonOption, ctx_of, fail, now, out, plural, print_json_lines


@db_app.command("prune")
def db_prune(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Remove now what database.keep_days no longer keeps: settled digests planned
    before then, what they carried to whom, and the bodies no kept digest shows (the
    scheduler does this every hour).  Entries are kept; none older is offered again."""
    from bot.plan.retention import remove_expired

    c = ctx_of(ctx)
    report = remove_expired(c.sessions(), c.settings, now=now())
    if as_json:
        print_json_lines(
            [{"before": report.before.isoformat(), "digests": report.digests, "appearances": report.appearances}]
        )
        return
    out.print(
        f"removed {plural(report.digests, 'digest')} planned before {report.before:%Y-%m-%d %H:%M} UTC "
        f"(database.keep_days = {c.settings.database.keep_days}) and "
        f"{plural(report.appearances, 'appearance')} of older sources",
        markup=False,
    )


def _sqlite_store(c: Context, command: str, other: str) -> Path:
    """The SQLite store's file; a usage error naming *other* on PostgreSQL."""
    from sqlalchemy.engine import make_url

    url = make_url(c.settings.database_url)
    if url.get_backend_name() != "sqlite" or not url.database:
        fail(f"db {command} works on a SQLite store; database.url is {url.get_backend_name()}: {other}", EXIT_USAGE)
    return Path(url.database)


def _journal_file(store: Path) -> Path:
    from bot.store.journal import journal_url

    return Path(journal_url(f"sqlite:///{store}").removeprefix("sqlite:///"))


@contextmanager
def _no_daemon(store: Path, doing: str) -> Iterator[None]:
    """Hold the scheduler's and the worker's locks for the command: none may run meanwhile."""
    from bot.run.roles import FileLock

    held = []
    try:
        for role in ("scheduler", "worker"):
            lock = FileLock(Path(f"{store}.{role}.lock"))
            if not lock.try_acquire():
                fail(f"{store}: a digestbot {role} is running on it; stop it before {doing}", EXIT_USAGE)
            held.append(lock)
        yield
    finally:
        for lock in held:
            lock.release()


@db_app.command("backup")
def db_backup(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Where to write the backup (one SQLite file).", metavar="FILE")],
    force: Annotated[bool, typer.Option("--force", help="Replace FILE when it exists.")] = False,
) -> None:
    """A consistent copy of the SQLite store, the unsubscribe journal in it, while the
    scheduler and workers run.  On PostgreSQL use pg_dump (docs/operating.md)."""
    from bot.store.copies import backup_sqlite
    from bot.store.errors import StoreError

    c = ctx_of(ctx)
    store = _sqlite_store(c, "backup", f"pg_dump --format=custom --file {file} '<database.url>'")
    if not store.is_file():
        fail(f"{store}: no store here to back up (database.url)", EXIT_USAGE)
    journal = _journal_file(store)
    if file.resolve() in {store.resolve(), journal.resolve()}:
        fail(f"{file}: that is the store itself; name a new file", EXIT_USAGE)
    if file.exists() and not force:
        fail(f"{file}: already exists (--force replaces it)", EXIT_USAGE)
    if not file.parent.is_dir():
        fail(f"{file.parent}: no such folder")
    try:
        facts = backup_sqlite(store, journal, file)
    except StoreError as exc:
        fail(str(exc))
    except sqlite3.Error as exc:
        fail(f"{file}: {exc}")
    except OSError as exc:
        fail(f"{exc.filename or file}: {exc.strerror}")
    tables = facts.tables
    out.print(
        f"backed up {store} (schema {facts.revision}) to {file}: {facts.size / 2**20:,.1f} MB, "
        f"{plural(tables.get('subscribers', 0), 'subscriber')}, {plural(tables.get('digests', 0), 'digest')}, "
        f"{plural(tables.get('unsubscribe_requests', 0), 'unsubscribe request')}",
        markup=False,
    )


@db_app.command("restore")
def db_restore(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A backup written by 'digestbot db backup'.", metavar="FILE")],
) -> None:
    """Put a backup in the SQLite store's place (stop the scheduler, workers and serve first).
    The store it replaces is moved aside, and what it recorded since the backup is kept:
    digests sent are not sent again, unsubscribes, bounces and purges stay.  Without a
    readable store to replace, digests on their way in the backup are marked failed
    (they may have gone out; 'digestbot resend' sends one again)."""
    from bot.store import engine as store_engine
    from bot.store.copies import (
        RestoreReport,
        backup_revision,
        carry_forward,
        journal_from_backup,
        place_backup,
        put_back,
        settle_in_flight,
    )
    from bot.store.errors import StoreError

    c = ctx_of(ctx)
    store = _sqlite_store(c, "restore", f"pg_restore --clean --if-exists --dbname '<database.url>' {file}")
    try:
        revision = backup_revision(file)
    except StoreError as exc:
        fail(str(exc))
    if revision > store_engine.HEAD_REVISION:
        fail(f"{file}: its schema is {revision}, newer than this digestbot's {store_engine.HEAD_REVISION}", EXIT_USAGE)
    with _no_daemon(store, "restoring"):
        aside, live = place_backup(file, store, now())
        report = RestoreReport(revision, aside, carried=False)
        try:
            restored = store_engine.make_engine(f"sqlite:///{store}")
            store_engine.upgrade(restored)
            restored.dispose()
            if aside is not None and live and backup_revision(aside) == store_engine.HEAD_REVISION:
                carry_forward(store, aside, report)
                report.carried = True
            else:
                note = f"on its way when the backup {file.name} was taken: it may have gone out"
                settle_in_flight(store, report, note)
            journal_from_backup(store, _journal_file(store), report)
        except (StoreError, OSError, sqlite3.DatabaseError) as exc:
            failed = put_back(store, aside, now())
            kept = f"; the half-restored copy is at {failed}" if failed else ""
            fail(f"{file}: restore stopped, {store} is as it was: {exc}{kept}")
    _say_restored(store, file, report)


def _say_restored(store: Path, file: Path, report: Any) -> None:
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
    elif report.in_flight_failed:
        shown = ", ".join(f"#{n}" for n in report.in_flight_failed[:10])
        more = "" if len(report.in_flight_failed) <= 10 else ", ..."
        out.print(
            f"no store to compare with: {plural(len(report.in_flight_failed), 'digest')} on its way in the backup "
            f"marked failed ({shown}{more}); 'digestbot resend N' sends one again. Digests sent after the "
            "backup was taken are not known to it.",
            markup=False,
        )
    if report.requests_to_apply:
        out.print(f"{plural(report.requests_to_apply, 'unsubscribe request')} will be applied on start", markup=False)


@db_app.command("copy")
def db_copy(
    ctx: typer.Context,
    to: Annotated[str, typer.Option("--to", help="An empty PostgreSQL database: postgresql+psycopg://USER@HOST/DB.")],
) -> None:
    """Copy the SQLite store into an empty PostgreSQL database, for outgrowing one
    machine (stop the scheduler and workers first).  Pending unsubscribes are applied
    first; the schema is created at this digestbot's revision, every table copied in
    one transaction, sequences set past the copied ids, and row counts compared.  The
    SQLite store is left as it was; point database.url at the copy afterwards."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from bot.store import engine as store_engine
    from bot.store.copies import copy_tables
    from bot.store.errors import StoreError, meaning
    from bot.store.journal import journal_url
    from bot.unsubscribes import journal_of

    c = ctx_of(ctx)
    store = _sqlite_store(c, "copy", "copy a PostgreSQL database with pg_dump and pg_restore")
    try:
        target_url = make_url(to)
    except ArgumentError:
        fail(f"--to: {to!r} is not a database URL (postgresql+psycopg://USER@HOST/DB)", EXIT_USAGE)
    if target_url.get_backend_name() != "postgresql":
        fail(f"--to: {target_url.get_backend_name()} is not PostgreSQL (postgresql+psycopg://USER@HOST/DB)", EXIT_USAGE)
    shown = target_url.render_as_string(hide_password=True)
    with _no_daemon(store, "copying"):
        factory = c.sessions()
        journal_of(factory).apply_pending(factory)
        target = store_engine.make_engine(to)
        try:
            if store_engine.current_revision(target) is not None or _has_tables(target):
                fail(f"--to: {shown} is not empty; copy into a new database (createdb) or schema", EXIT_USAGE)
            store_engine.upgrade(target)
            journal_file = Path(make_url(journal_url(c.settings.database_url)).database or "")
            journal = store_engine.make_engine(f"sqlite:///{journal_file}") if journal_file.is_file() else None
            try:
                counts = copy_tables(c.engine, journal, target, lambda table, rows: None)
            finally:
                if journal is not None:
                    journal.dispose()
        except (StoreError, DBAPIError) as exc:
            _empty_again(target)
            said = meaning(exc, shown) if isinstance(exc, DBAPIError) else None
            reason = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
            fail(f"--to: copy stopped, nothing kept there: {said or reason}")
        finally:
            target.dispose()
    for table, (read, written) in counts.items():
        out.print(f"{table}: {read:,} rows, {written:,} in the copy", markup=False)
    out.print(
        f"copied {store} into {shown} (schema {store_engine.HEAD_REVISION}); "
        f"set database.url (or DIGESTBOT_DATABASE__URL) to it and start the scheduler and workers",
        markup=False,
    )


def _has_tables(engine: Any) -> bool:
    from sqlalchemy import inspect

    return bool(inspect(engine).get_table_names())


def _empty_again(engine: Any) -> None:
    """Drop what a stopped copy created, so the database is empty as it was."""
    from sqlalchemy import text

    from bot.store.base import Base

    try:
        with engine.begin() as connection:
            Base.metadata.drop_all(connection)
            connection.execute(text("DROP TABLE IF EXISTS alembic_version"))
    except Exception:  # noqa: BLE001 - the copy's own error is the one to report
        return
