"""CLI commands ``dumps`` and ``feeds``: ingest, and list what was ingested (the entries
in ``entry_commands``).  A thin shell over the ingest service and the store; never parses
or stores itself."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, display_path, err, fail, out, print_json_lines, report_ingest
from bot.cli.shell import JsonOption, command_group, ctx_of
from bot.cli.tables import Column, fitted
from bot.domain import SourceStatus
from bot.domain.text import plural

dumps_app = command_group("Ingest dump files and feeds; list what was ingested.")


feeds_app = command_group("Fetch the configured feed URLs.")


@dumps_app.command("ingest")
def dumps_ingest(
    ctx: typer.Context,
    paths: Annotated[
        list[str] | None, typer.Argument(help="Dump or feed files, or folders (default: the dump folder).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Ingest files (in the order given; folders in name order).

    Without PATH, scans the configured dump folder for files not yet ingested,
    as the scheduler does.  Exit 1 when any file failed.
    """
    from bot.ingest.watcher import ingest_named, recent_files, scan_folder

    if paths is not None and not all(p.strip() for p in paths):
        fail("PATH: an empty path (name a file or a folder; without PATH the dump folder is scanned)", EXIT_USAGE)
    c = ctx_of(ctx)
    factory = c.sessions()
    left: list[Path] = []
    if paths:
        results = ingest_named(factory, map(Path, paths), rules=c.rules, max_bytes=c.settings.watch.max_file_bytes)
    else:
        quiet = c.settings.watch.quiet_seconds
        results = scan_folder(
            factory, c.dump_dir, quiet_seconds=quiet, rules=c.rules, max_bytes=c.settings.watch.max_file_bytes
        )
        left = recent_files(c.dump_dir, quiet_seconds=quiet)
        if left:
            named = ", ".join(display_path(str(p)) for p in left[:3]) + (", …" if len(left) > 3 else "")
            err.print(
                f"left {plural(len(left), 'file')} for the next scan ({named}): changed in the last {quiet:g} s "
                "(watch.quiet_seconds), so maybe still being written; name a file to read it now",
                markup=False,
            )
    report_ingest(results, as_json, left=len(left))
    if any(r.status is SourceStatus.FAILED for r in results):
        raise typer.Exit(EXIT_INPUT_FAILED)


@dumps_app.command("list")
def dumps_list(
    ctx: typer.Context,
    status: Annotated[SourceStatus | None, typer.Option(help="Only sources with this status.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Every ingested, duplicate or failed source, oldest first."""
    from bot.store.sources import list_sources

    with ctx_of(ctx).sessions()() as session:
        sources = list_sources(session, status=status)
    if as_json:
        print_json_lines(
            [
                {
                    "id": s.id,
                    "file": s.path,
                    "origin": s.origin,
                    "format": s.format,
                    "entries": s.entries,
                    "new": s.new,
                    "updated": s.updated,
                    "status": s.status,
                    "error": s.error,
                    "duplicate_of": s.duplicate_of,
                    "sha256": s.sha256,
                    "size": s.size,
                    "ingested_at": s.ingested_at,
                }
                for s in sources
            ]
        )
        return
    columns = [
        Column("id", whole=True, justify="right"),
        Column("file"),
        Column("entries", whole=True, drop=2, justify="right"),
        Column("new", whole=True, drop=1, justify="right"),
        Column("status", whole=True),
        Column("error"),
    ]
    rows = [
        [
            str(s.id),
            display_path(s.path),
            str(s.entries),
            str(s.new),
            s.status.value + (f" (of #{s.duplicate_of})" if s.duplicate_of else ""),
            s.error or "",
        ]
        for s in sources
    ]
    out.print(fitted(columns, rows, width=out.width, title="Sources"))


@feeds_app.command("fetch")
def feeds_fetch(
    ctx: typer.Context,
    urls: Annotated[
        list[str] | None,
        typer.Argument(help="Feed URLs or arXiv categories (arxiv:cs.LG+cs.CL; default: feeds.urls from the config)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Fetch feed URLs with conditional GET and ingest what changed."""
    from bot.domain.arxiv_sources import ArxivSourceError, categories_of, is_arxiv_source
    from bot.ingest.watcher import fetch_feeds

    for url in urls or []:
        try:
            if is_arxiv_source(url):
                categories_of(url)
        except ArxivSourceError as exc:
            fail(str(exc), EXIT_USAGE)
    c = ctx_of(ctx)
    results = fetch_feeds(c.sessions(), c.settings, urls=urls or None, rules=c.rules)
    report_ingest(results, as_json)
    if any(r.status is SourceStatus.FAILED for r in results):
        raise typer.Exit(EXIT_INPUT_FAILED)
