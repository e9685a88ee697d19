"""CLI commands ``dumps``, ``feeds`` and ``entries``: ingest and browse what was ingested.
A thin shell over the ingest service and the store; never parses or stores itself."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer

from bot.cli.shell import (
    EXIT_INPUT_FAILED,
    EXIT_USAGE,
    MAX_ROWS,
    JsonOption,
    command_group,
    ctx_of,
    display_path,
    err,
    fail,
    new_table,
    out,
    parse_date,
    plural,
    print_json_lines,
    report_ingest,
)
from bot.cli.tables import Column, fitted
from bot.domain import SourceStatus

dumps_app = command_group("Ingest dump files and feeds; list what was ingested.")


entries_app = command_group("Browse stored entries.")


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
    urls: Annotated[list[str] | None, typer.Argument(help="Feed URLs (default: feeds.urls from the config).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Fetch feed URLs with conditional GET and ingest what changed."""
    from bot.ingest.watcher import fetch_feeds

    c = ctx_of(ctx)
    results = fetch_feeds(c.sessions(), c.settings, urls=urls or None, rules=c.rules)
    report_ingest(results, as_json)
    if any(r.status is SourceStatus.FAILED for r in results):
        raise typer.Exit(EXIT_INPUT_FAILED)


def _entry_json(e: Any) -> dict[str, Any]:
    """An entry as ``--json`` shows it: every field of its content (``extra`` as an
    object), its key, tags and first sighting."""
    content = {f.name: getattr(e.content, f.name) for f in fields(e.content)}
    return {
        "key": e.key,
        **content,
        "extra": dict(e.content.extra),
        "tags": e.tags,
        "first_seen_at": e.first_seen_at,
        "first_seen_source_id": e.first_seen_source_id,
    }


@entries_app.command("list")
def entries_list(
    ctx: typer.Context,
    tag: Annotated[str | None, typer.Option(help="Only entries with this tag (any origin, case-insensitive).")] = None,
    since: Annotated[
        str | None, typer.Option(help="Only entries first seen on or after this date (YYYY-MM-DD).")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, max=MAX_ROWS, help="At most this many.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Stored entries, most recently first seen first."""
    from bot.store.entry_reads import list_entries

    since_date = parse_date(since)
    with ctx_of(ctx).sessions()() as session:
        entries = list_entries(session, tag=tag, since=since_date, limit=limit)
    if as_json:
        print_json_lines([_entry_json(e) for e in entries])
        return
    # Keys are what `entries show` takes: never cut.
    columns = [
        Column("key", whole=True),
        Column("kind", drop=1),
        Column("title"),
        Column("date", whole=True),
        Column("tags"),
    ]
    rows = [
        [
            e.key,
            e.content.kind.value,
            e.content.title,
            e.content.published.isoformat() if e.content.published else "",
            ", ".join(e.tags),
        ]
        for e in entries
    ]
    out.print(fitted(columns, rows, width=out.width, title=f"Entries ({len(entries)})"))


@entries_app.command("show")
def entries_show(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="Entry key, arXiv id, DOI or numeric id.")],
    as_json: JsonOption = False,
) -> None:
    """One entry with its tags (and where they came from) and every summary variant seen."""
    from bot.store.entry_reads import appearances_of, find_entry, tag_origins_of

    with ctx_of(ctx).sessions()() as session:
        entry = find_entry(session, key)
        if entry is None:
            fail(f"no entry {key!r} (try 'digestbot entries list')")
            return
        appearances = appearances_of(session, entry.id)
        origins = tag_origins_of(session, entry.id)
    if as_json:
        data = _entry_json(entry)
        data["tag_origins"] = [{"tag": t, "origin": o} for t, o in origins]
        data["appearances"] = [
            {
                "source_id": a.source_id,
                "file": a.path,
                "position": a.position,
                "summary": a.summary,
                "ingested_at": a.ingested_at,
            }
            for a in appearances
        ]
        print_json_lines([data])
        return
    table = new_table(show_header=False, box=None, title=f"{entry.content.kind.value} {entry.key}")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("title", entry.content.title)
    table.add_row("authors", ", ".join(entry.content.authors))
    table.add_row("published", entry.content.published.isoformat() if entry.content.published else "")
    table.add_row("first seen", f"{entry.first_seen_at:%Y-%m-%d %H:%M} UTC (source #{entry.first_seen_source_id})")
    table.add_row("tags", ", ".join(f"{t} ({o})" for t, o in origins))
    for name, value in (("arXiv", entry.content.arxiv_id), ("DOI", entry.content.doi)):
        if value:
            table.add_row(name, value)
    for k, v in entry.content.extra:
        table.add_row(k, v)
    table.add_row("links", "\n".join(entry.content.links))
    table.add_row("summary", entry.content.summary)
    out.print(table)
    rows = [
        [str(a.source_id), display_path(a.path), a.summary if len(a.summary) <= 160 else a.summary[:157] + "..."]
        for a in appearances
    ]
    columns = [Column("source", whole=True, justify="right"), Column("file"), Column("summary variant")]
    out.print(fitted(columns, rows, width=out.width, title=f"Appearances ({len(appearances)})"))
