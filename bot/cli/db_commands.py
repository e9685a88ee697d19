"""CLI commands on the store as a whole: ``db prune`` (retention, now), ``db backup``
and ``db copy`` (``db restore`` in ``db_restore_commands``), and what they share: the
SQLite store's file, held alone.  Thin shells over ``bot.plan.retention`` and
``bot.store.copies``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from bot.cli.admin import db_app
from bot.cli.context import Context
from bot.cli.output import EXIT_USAGE, fail, out, print_json_lines
from bot.cli.shell import JsonOption, ctx_of, now
from bot.domain.text import plural


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


def sqlite_store(c: Context, command: str, other: str) -> Path:
    """The SQLite store's file; a usage error naming *other* on PostgreSQL."""
    from sqlalchemy.engine import make_url

    url = make_url(c.settings.database_url)
    if url.get_backend_name() != "sqlite" or not url.database:
        fail(f"db {command} works on a SQLite store; database.url is {url.get_backend_name()}: {other}", EXIT_USAGE)
    return Path(url.database)


def journal_file(store: Path) -> Path:
    from bot.store.journal import journal_url

    return Path(journal_url(f"sqlite:///{store}").removeprefix("sqlite:///"))


@contextmanager
def alone(store: Path, doing: str) -> Iterator[None]:
    """The store held by this command alone (``bot.store.store_holders``): a usage error naming
    the processes that have it open (the scheduler, workers, serve, another command)."""
    from bot.store.store_errors import StoreError
    from bot.store.store_holders import StoreInUse, alone

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
    from bot.store.store_files import lock_files, sqlite_files
    from bot.tokens import key_file

    journal = journal_file(store)
    parts = [*sqlite_files(store), *sqlite_files(journal), *lock_files(store)]
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
    from bot.store.store_errors import StoreError
    from bot.tokens import backup_key, key_beside

    c = ctx_of(ctx)
    store = sqlite_store(c, "backup", f"pg_dump --format=custom --file {file} '<database.url>'")
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
        facts = backup_sqlite(store, journal_file(store), file)
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
    from bot.store.journal import journal_url
    from bot.store.store_errors import StoreError, meaning
    from bot.unsubscribes import journal_of

    c = ctx_of(ctx)
    store = sqlite_store(c, "copy", "copy a PostgreSQL database with pg_dump and pg_restore")
    try:
        target_url = make_url(to)
    except ArgumentError:
        fail(f"--to: {to!r} is not a database URL (postgresql+psycopg://USER@HOST/DB)", EXIT_USAGE)
    if target_url.get_backend_name() != "postgresql":
        fail(f"--to: {target_url.get_backend_name()} is not PostgreSQL (postgresql+psycopg://USER@HOST/DB)", EXIT_USAGE)
    shown = target_url.render_as_string(hide_password=True)
    factory = c.sessions()
    with alone(store, "copying"):
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
