"""CLI commands ``subscribers import`` and ``export``: the subscribers as a CSV file, in
and out.  A thin shell over ``bot.subscribers.csv_io``, which validates every row."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from bot.cli.output import EXIT_INPUT_FAILED, JsonObject, err, fail, out, print_json_lines
from bot.cli.shell import JsonOption, ctx_of, now
from bot.cli.subscriber_commands import subscribers_app
from bot.cli.subscriber_views import operator_note
from bot.cli.tables import Column, fitted
from bot.domain import SubscriberStatus
from bot.domain.text import plural
from bot.subscribers.settings import SETTINGS


@subscribers_app.command("import")
def subscribers_import(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(
            help="CSV with a header; columns: email, name, filter, timezone, send_hour, status, backfill, cadence, "
            + ", ".join(f"{s.name} (yes or no)" for s in SETTINGS)
            + "."
        ),
    ],
    as_json: JsonOption = False,
) -> None:
    """Upsert subscribers from CSV (idempotent).  Good rows are imported even when
    others are bad; every bad row is listed with its line number.  Exit 1 if any was bad."""
    from bot.subscribers.csv_io import import_csv

    c = ctx_of(ctx)
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{file}: cannot read: {exc}", EXIT_INPUT_FAILED)
        return
    report = import_csv(
        c.sessions(), c.settings, text, now(), rules=c.rules, vouched_by=operator_note(f"subscribers import {file}")
    )
    if as_json:
        totals: JsonObject = {
            "created": report.created,
            "updated": report.updated,
            "unchanged": report.unchanged,
            "bad_rows": len(report.errors),
        }
        print_json_lines(
            [
                totals,
                *({"line": e.line, "error": e.reason} for e in report.errors),
                *({"line": w.line, "warning": w.reason} for w in report.warnings),
            ]
        )
    else:
        counts = f"{report.created} added, {report.updated} updated, {report.unchanged} unchanged"
        out.print(f"{file}: {counts}, {plural(len(report.errors), 'bad row')}", markup=False)
        if report.errors:
            columns = [Column("line", whole=True, justify="right"), Column("reason")]
            rows = [[str(e.line), e.reason] for e in report.errors]
            err.print(fitted(columns, rows, width=err.width, title="Bad rows (not imported)"))
        for w in report.warnings:
            err.print(f"warning: line {w.line}: {w.reason}", markup=False)
    if report.errors:
        raise typer.Exit(EXIT_INPUT_FAILED)


@subscribers_app.command("export")
def subscribers_export(
    ctx: typer.Context,
    status: Annotated[SubscriberStatus | None, typer.Option(help="Only subscribers with this status.")] = None,
    spreadsheet: Annotated[
        bool,
        typer.Option(
            "--spreadsheet",
            help="Prefix cells that start with = + - @ with a ' so a spreadsheet shows them as text "
            "(the file then no longer round-trips through 'import').",
        ),
    ] = False,
    library: Annotated[
        str | None, typer.Option("--library", help="Print this subscriber's library as CSL-JSON instead.")
    ] = None,
) -> None:
    """Print all subscribers as CSV, exactly as stored: the format 'import' reads."""
    from bot.subscribers.csv_io import export_csv

    if library is not None:
        from bot.cli.library_commands import print_library

        print_library(ctx, library)
        return
    sys.stdout.write(export_csv(ctx_of(ctx).sessions(), status, spreadsheet=spreadsheet))
