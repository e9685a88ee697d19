"""CLI command ``db restore``: a backup, untrusted, into a store made afresh, with what
the live store recorded since carried forward.  A thin shell over
``bot.whole_store.restore``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.admin import db_app
from bot.cli.db_commands import fail_as
from bot.cli.output import out
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
    from bot.whole_store.restore import restore
    from bot.whole_store.sqlite_store import WholeStoreError

    c = ctx_of(ctx)
    try:
        done = restore(c.settings, file, now=now())
    except WholeStoreError as exc:
        fail_as(exc)
    _say_restored(done.store, file, done.report, done.key_note)


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
