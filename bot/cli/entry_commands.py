"""CLI commands ``entries list`` and ``show``: browse the stored entries.  A thin shell
over the store's reads; never parses or stores itself."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.output import JsonObject, display_path, fail, new_table, out, print_json_lines
from bot.cli.shell import MAX_ROWS, JsonOption, command_group, ctx_of, parse_date
from bot.cli.tables import Column, fitted

if TYPE_CHECKING:
    from bot.domain import EntryView

entries_app = command_group("Browse stored entries.")


def _entry_json(e: EntryView) -> JsonObject:
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
        Column("key", whole=True, drop=2),  # left out before the title folds over many lines
        Column("kind", drop=3),  # the key says it too
        Column("title", wants=36, words=True, share=3),
        Column("date", whole=True),
        Column("tags", wants=14, share=1),
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
    table = new_table(show_header=False, boxed=False, title=f"{entry.content.kind.value} {entry.key}")
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
