"""CLI commands on the store as a whole: ``db prune`` (retention, now), ``db backup``,
``db copy`` and ``db adopt-key`` (``db restore`` in ``db_restore_commands``).  Thin
shells over ``bot.plan.retention`` and the ``bot.whole_store`` services."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from bot.cli.admin import db_app
from bot.cli.output import EXIT_USAGE, fail, out, print_json_lines
from bot.cli.shell import JsonOption, ctx_of, now
from bot.domain.text import plural

if TYPE_CHECKING:
    from bot.whole_store.sqlite_store import WholeStoreError


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


def fail_as(exc: WholeStoreError) -> NoReturn:
    """A whole-store operation's refusal or failure, as the command's one line and exit code."""
    fail(str(exc), EXIT_USAGE if exc.usage else 1)


@db_app.command("backup")
def db_backup(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Where to write the backup (one SQLite file).", metavar="FILE")],
    force: Annotated[bool, typer.Option("--force", help="Replace FILE when it exists.")] = False,
) -> None:
    """A consistent copy of the SQLite store, the unsubscribe journal in it, while the
    scheduler, workers and serve run; the signing key beside it as FILE.key (mode
    0600), which its restore needs.  On PostgreSQL use pg_dump (docs/operating.md)."""
    from bot.whole_store.backup import back_up
    from bot.whole_store.sqlite_store import WholeStoreError

    c = ctx_of(ctx)
    try:
        done = back_up(c.settings, file, force=force)
    except WholeStoreError as exc:
        fail_as(exc)
    facts, tables = done.facts, done.facts.tables
    out.print(
        f"backed up {done.store} (schema {facts.revision}) to {file}: {facts.size / 2**20:,.1f} MB, "
        f"{plural(tables.get('subscribers', 0), 'subscriber')}, {plural(tables.get('digests', 0), 'digest')}, "
        f"{plural(tables.get('unsubscribe_requests', 0), 'unsubscribe request')}",
        markup=False,
    )
    out.print(done.key_note, markup=False)


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
    from bot.store.engine import HEAD_REVISION
    from bot.whole_store.copy import copy_to_postgresql
    from bot.whole_store.sqlite_store import WholeStoreError

    c = ctx_of(ctx)
    try:
        done = copy_to_postgresql(c.settings, lambda: (c.engine, c.sessions()), to)
    except WholeStoreError as exc:
        fail_as(exc)
    for table, (read, written) in done.counts.items():
        out.print(f"{table}: {read:,} {'row' if read == 1 else 'rows'}, {written:,} in the copy", markup=False)
    out.print(
        f"copied {done.store} into {done.target} (schema {HEAD_REVISION}); "
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
