"""CLI commands on the store as a whole: ``db prune`` (retention, now), ``db backup``,
``db restore`` and ``db copy``.  Thin shells over ``bot.plan.retention`` and
``bot.store.copies``."""

from __future__ import annotations

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
def _alone(store: Path, doing: str) -> Iterator[None]:
    """The store held by this command alone (``bot.store.holders``): a usage error naming
    the processes that have it open (the scheduler, workers, serve, another command)."""
    from bot.store.errors import StoreError
    from bot.store.holders import StoreInUse, alone

    try:
        with alone(store, doing):
            yield
    except StoreInUse as exc:
        fail(str(exc), EXIT_USAGE)
    except StoreError as exc:
        fail(str(exc))


def _family(c: Context, store: Path) -> set[Path]:
    """Every file of the store's (its WAL, shared memory and journal, the unsubscribe
    journal's, the lock files, the signing key), as they resolve: no backup goes there."""
    from bot.tokens import key_file

    journal = _journal_file(store)
    parts = [Path(f"{base}{suffix}") for base in (store, journal) for suffix in ("", "-wal", "-shm", "-journal")]
    parts += [Path(f"{store}.{lock}") for lock in ("lock", "scheduler.lock", "worker.lock")]
    key = key_file(c.settings)
    return {part.resolve() for part in [*parts, *([key] if key else [])]}


@db_app.command("backup")
def db_backup(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Where to write the backup (one SQLite file).", metavar="FILE")],
    force: Annotated[bool, typer.Option("--force", help="Replace FILE when it exists.")] = False,
) -> None:
    """A consistent copy of the SQLite store, the unsubscribe journal in it, while the
    scheduler, workers and serve run; the signing key beside it as FILE.key (mode
    0600), which its restore needs.  On PostgreSQL use pg_dump (docs/operating.md)."""
    import sqlite3

    from bot.store.copies import backup_sqlite
    from bot.store.errors import StoreError
    from bot.tokens import backup_key, key_beside

    c = ctx_of(ctx)
    store = _sqlite_store(c, "backup", f"pg_dump --format=custom --file {file} '<database.url>'")
    if not store.is_file():
        fail(f"{store}: no store here to back up (database.url)", EXIT_USAGE)
    family = _family(c, store)
    for target in (file, key_beside(file)):
        if target.resolve() in family:
            fail(f"{target}: that is one of the store's own files ({store} and beside it); name a new file", EXIT_USAGE)
    if file.exists() and not force:
        fail(f"{file}: already exists (--force replaces it)", EXIT_USAGE)
    if not file.parent.is_dir():
        fail(f"{file.parent}: no such folder")
    _ = c.engine  # held open by this command: no restore or copy meanwhile
    try:
        facts = backup_sqlite(store, _journal_file(store), file)
        key = backup_key(c.settings, file)
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
    out.print(key, markup=False)


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
    store to replace, digests on their way in the backup are marked failed (they may
    have gone out; 'digestbot resend' sends one again).  FILE.key, the signing key
    'db backup' wrote beside it, is put back when the restored links need it."""
    import sqlite3

    from bot.files import exclusive_file
    from bot.store import restores
    from bot.store.errors import StoreError

    c = ctx_of(ctx)
    store = _sqlite_store(c, "restore", f"pg_restore --clean --if-exists --dbname '<database.url>' {file}")
    store.parent.mkdir(parents=True, exist_ok=True)  # a new machine's var/
    with _alone(store, "restoring"):
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
            _rebuild(restores, file, store, partial, report)
        except (StoreError, OSError, sqlite3.DatabaseError) as exc:
            restores.remove(partial)
            fail(f"{file}: restore stopped, {store} is as it was: {_said(exc)}")
        report.aside = restores.put_in_place(partial, store, now())
        try:
            restores.journal_from_backup(store, _journal_file(store), report)
        except (StoreError, OSError, sqlite3.DatabaseError) as exc:
            failed = restores.put_back(store, report.aside, now())
            kept = f"; the restored copy is at {failed}" if failed else ""
            fail(f"{file}: restore stopped, {store} is as it was: {_said(exc)}{kept}")
        key = _restore_key(c, file, store, stamp)
    _say_restored(store, file, report, key)


def _said(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _rebuild(restores: Any, file: Path, store: Path, partial: Path, report: Any) -> None:
    """The backup's rows in a store made afresh at its schema, brought to this one's, with
    what the live store recorded since (or, without one, its digests in flight settled)."""
    from bot.choose.filters import filter_fault

    restores.rebuild(file, partial, report.revision, filter_fault=filter_fault)
    if store.exists() and restores.readable(store) and restores.is_current(store):
        restores.carry_forward(partial, store, report)
    else:
        note = f"on its way when the backup {file.name} was taken: it may have gone out"
        restores.settle_in_flight(partial, report, note)


def _restore_key(c: Context, file: Path, store: Path, stamp: str) -> str | None:
    from bot.config import ConfigError
    from bot.store.restores import read_fact
    from bot.tokens import KEY_ID_FACT, restore_key

    try:
        return restore_key(c.settings, file, read_fact(store, KEY_ID_FACT), stamp)
    except (ConfigError, OSError) as exc:
        return f"the signing key was not put back: {_said(exc)}"


def _say_restored(store: Path, file: Path, report: Any, key: str | None) -> None:
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
    if key:
        out.print(key, markup=False)


@db_app.command("copy")
def db_copy(
    ctx: typer.Context,
    to: Annotated[str, typer.Option("--to", help="An empty PostgreSQL database: postgresql+psycopg://USER@HOST/DB.")],
) -> None:
    """Copy the SQLite store into an empty PostgreSQL database, for outgrowing one
    machine; refused while any digestbot process (scheduler, worker, serve, another
    command) has the store open, so no unsubscribe acknowledged meanwhile is lost.  Pending unsubscribes are applied
    first; the schema is created at this digestbot's revision, every table copied in
    one transaction, sequences set past the copied ids, and row counts compared.  The
    SQLite store is left as it was; point database.url at the copy afterwards."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from bot.store import engine as store_engine
    from bot.store.copies import copy_tables, empty_again, holds_tables
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
    factory = c.sessions()
    with _alone(store, "copying"):
        journal_of(factory).apply_pending(factory)
        target = store_engine.make_engine(to)
        try:
            if store_engine.current_revision(target) is not None or holds_tables(target):
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
            empty_again(target)
            said = meaning(exc, shown) if isinstance(exc, DBAPIError) else None
            reason = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
            fail(f"--to: copy stopped, nothing kept there: {said or reason}")
        finally:
            target.dispose()
    for table, (read, written) in counts.items():
        out.print(f"{table}: {read:,} {'row' if read == 1 else 'rows'}, {written:,} in the copy", markup=False)
    out.print(
        f"copied {store} into {shown} (schema {store_engine.HEAD_REVISION}); "
        f"set database.url (or DIGESTBOT_DATABASE__URL) to it and start the scheduler and workers",
        markup=False,
    )


@db_app.command("adopt-key")
def db_adopt_key(ctx: typer.Context) -> None:
    """Sign the store's links with the configured signing key from now on (made when
    there is none): after the key they were signed with is lost for good.  Every manage
    link, feed and List-Unsubscribe already mailed then answers 404; each reader's
    next digest carries links that work."""
    from bot.tokens import adopt_key, key_file

    c = ctx_of(ctx)
    other = adopt_key(c.settings, c.sessions())
    where = key_file(c.settings) or "DIGESTBOT_WEB__SIGNING_KEY"
    said = f"the store's links are signed with the key in {where} from now on"
    if other:
        said += "; the links mailed before answer 404 (each reader's next digest carries new ones)"
    out.print(said, markup=False)
