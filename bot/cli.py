"""Admin CLI: a thin shell over the service functions (ingest, watcher, store).

Exit codes: 0 ok, 1 some input failed (or a looked-up item is missing),
2 usage or configuration error.  Every list/show command takes ``--json`` and
then prints one JSON object per line with snake_case keys.  Never holds
business logic of its own: anything a command does, the scheduler can call.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from datetime import date, datetime
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.config import ConfigError, Settings, load_settings
from bot.domain import IngestResult, SourceStatus
from bot.store import engine as store_engine

app = typer.Typer(
    help="digestbot: research-feed digest dumps in, personal daily emails out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
dumps_app = typer.Typer(help="Ingest dump files and feeds; list what was ingested.", no_args_is_help=True)
entries_app = typer.Typer(help="Browse stored entries.", no_args_is_help=True)
feeds_app = typer.Typer(help="Fetch the configured feed URLs.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
config_app = typer.Typer(help="Inspect the effective configuration.", no_args_is_help=True)
app.add_typer(dumps_app, name="dumps")
app.add_typer(entries_app, name="entries")
app.add_typer(feeds_app, name="feeds")
app.add_typer(db_app, name="db")
app.add_typer(config_app, name="config")

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)

EXIT_OK, EXIT_INPUT_FAILED, EXIT_USAGE = 0, 1, 2

JsonOption = Annotated[bool, typer.Option("--json", help="One JSON object per line instead of a table.")]


@dataclass
class Context:
    """What every command needs: settings (loaded once) and a lazily opened store."""

    settings: Settings
    _engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = store_engine.make_engine(
                self.settings.database_url, busy_timeout_ms=self.settings.database.busy_timeout_ms
            )
        return self._engine

    def sessions(self, *, migrate: bool = True) -> sessionmaker[Session]:
        """Sessions on an up-to-date schema: SQLite is migrated on start, other
        databases must have been migrated with ``digestbot db upgrade``."""
        if migrate:
            current = store_engine.current_revision(self.engine)
            if current != store_engine.head_revision():
                if store_engine.is_sqlite(self.engine):
                    store_engine.upgrade(self.engine)
                else:
                    fail(f"database schema is at {current or 'nothing'}; run 'digestbot db upgrade'", EXIT_USAGE)
        return store_engine.sessions(self.engine)


def fail(message: str, code: int = EXIT_INPUT_FAILED) -> None:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(code)


def ctx_of(ctx: typer.Context) -> Context:
    return ctx.ensure_object(Context)  # type: ignore[no-any-return]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def print_json_lines(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        sys.stdout.write(json.dumps(_jsonable(row), ensure_ascii=False, sort_keys=False) + "\n")


def display_path(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


@app.callback()
def main_callback(
    ctx: typer.Context,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Config file (default: $DIGESTBOT_CONFIG or config/digestbot.toml).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress to stderr.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        ctx.obj = Context(load_settings(config))
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)


# --- db ---------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply pending migrations (run automatically on start for SQLite)."""
    c = ctx_of(ctx)
    store_engine.upgrade(c.engine)
    out.print(f"database at revision {store_engine.current_revision(c.engine)}")


@db_app.command("current")
def db_current(ctx: typer.Context) -> None:
    """Show the schema revision of the database and of this code."""
    c = ctx_of(ctx)
    out.print(f"database: {store_engine.current_revision(c.engine) or 'empty'}; code: {store_engine.head_revision()}")


# --- config -----------------------------------------------------------------


@config_app.command("show")
def config_show(ctx: typer.Context) -> None:
    """Print the effective configuration as JSON (secrets masked)."""
    print(json.dumps(ctx_of(ctx).settings.redacted(), indent=2))


# --- dumps ------------------------------------------------------------------


def _report(results: list[IngestResult], as_json: bool) -> None:
    if as_json:
        print_json_lines(
            [
                {
                    "path": r.path,
                    "status": r.status,
                    "source_id": r.source_id,
                    "entries": r.entries,
                    "new": r.new,
                    "updated": r.updated,
                    "duplicate_of": r.duplicate_of,
                    "error": r.error,
                }
                for r in results
            ]
        )
        return
    for r in results:
        if r.status is SourceStatus.FAILED:
            err.print(f"failed: {r.error}", markup=False)
        elif r.status is SourceStatus.DUPLICATE:
            out.print(f"{display_path(r.path)}: duplicate of source #{r.duplicate_of}, nothing new", markup=False)
        elif r.status is SourceStatus.NOT_MODIFIED:
            out.print(f"{r.path}: not modified", markup=False)
        else:
            out.print(
                f"{display_path(r.path)}: {r.entries} entries, {r.new} new, {r.updated} updated", markup=False
            )
    if not results:
        out.print("nothing new to ingest")


@dumps_app.command("ingest")
def dumps_ingest(
    ctx: typer.Context,
    paths: Annotated[list[Path] | None, typer.Argument(help="Dump or feed files, or folders (default: the dump folder).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Ingest files (in the order given; folders in name order).

    Without PATH, scans the configured dump folder for files not yet ingested,
    as the scheduler does.  Exit 1 when any file failed.
    """
    from bot.ingest import ingest_file
    from bot.watcher import expand, scan_folder

    c = ctx_of(ctx)
    factory = c.sessions()
    if paths:
        results = [ingest_file(factory, p) for p in expand(paths)]
    else:
        results = scan_folder(factory, c.settings.paths.dump_dir, quiet_seconds=c.settings.watch.quiet_seconds)
    _report(results, as_json)
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
    table = Table("id", "file", "entries", "new", "status", "error", title="Sources")
    for s in sources:
        table.add_row(
            str(s.id),
            display_path(s.path),
            str(s.entries),
            str(s.new),
            s.status.value + (f" (of #{s.duplicate_of})" if s.duplicate_of else ""),
            s.error or "",
        )
    out.print(table)


# --- feeds ------------------------------------------------------------------


@feeds_app.command("fetch")
def feeds_fetch(
    ctx: typer.Context,
    urls: Annotated[list[str] | None, typer.Argument(help="Feed URLs (default: feeds.urls from the config).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Fetch feed URLs with conditional GET and ingest what changed."""
    from bot.watcher import fetch_feeds

    c = ctx_of(ctx)
    results = fetch_feeds(c.sessions(), c.settings, urls=urls or None)
    _report(results, as_json)
    if any(r.status is SourceStatus.FAILED for r in results):
        raise typer.Exit(EXIT_INPUT_FAILED)


# --- entries ----------------------------------------------------------------


def _entry_json(e: Any) -> dict[str, Any]:
    return {
        "key": e.key,
        "kind": e.kind,
        "title": e.title,
        "authors": e.authors,
        "published": e.published,
        "tags": e.tags,
        "first_seen_at": e.first_seen_at,
        "first_seen_source_id": e.first_seen_source_id,
        "arxiv_id": e.arxiv_id,
        "doi": e.doi,
        "links": e.links,
        "summary": e.summary,
        "summary_type": e.summary_type,
        "extra": e.extra,
    }


def _parse_date(value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)", param_hint="--since") from None


@entries_app.command("list")
def entries_list(
    ctx: typer.Context,
    tag: Annotated[str | None, typer.Option(help="Only entries with this tag (any origin, case-insensitive).")] = None,
    since: Annotated[str | None, typer.Option(help="Only entries first seen on or after this date (YYYY-MM-DD).")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Stored entries, most recently first seen first."""
    from bot.store.entries import list_entries

    since_date = _parse_date(since)
    with ctx_of(ctx).sessions()() as session:
        entries = list_entries(session, tag=tag, since=since_date, limit=limit)
    if as_json:
        print_json_lines([_entry_json(e) for e in entries])
        return
    table = Table(title=f"Entries ({len(entries)})")
    # Keys are what `entries show` takes: never truncate them.
    table.add_column("key", no_wrap=True, min_width=max((len(e.key) for e in entries), default=3))
    for column in ("kind", "title", "date", "tags"):
        table.add_column(column, ratio=3 if column == "title" else None)
    for e in entries:
        table.add_row(e.key, e.kind.value, e.title, e.published.isoformat() if e.published else "", ", ".join(e.tags))
    out.print(table)


@entries_app.command("show")
def entries_show(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="Entry key, arXiv id, DOI or numeric id.")],
    as_json: JsonOption = False,
) -> None:
    """One entry with its tags (and where they came from) and every summary variant seen."""
    from bot.store.entries import appearances_of, find_entry, tag_origins_of

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
            {"source_id": a.source_id, "file": a.path, "position": a.position, "summary": a.summary, "ingested_at": a.ingested_at}
            for a in appearances
        ]
        print_json_lines([data])
        return
    table = Table(show_header=False, box=None, title=f"{entry.kind.value} {entry.key}")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row("title", entry.title)
    table.add_row("authors", ", ".join(entry.authors))
    table.add_row("published", entry.published.isoformat() if entry.published else "")
    table.add_row("first seen", f"{entry.first_seen_at:%Y-%m-%d %H:%M} UTC (source #{entry.first_seen_source_id})")
    table.add_row("tags", ", ".join(f"{t} ({o})" for t, o in origins))
    for name, value in (("arXiv", entry.arxiv_id), ("DOI", entry.doi)):
        if value:
            table.add_row(name, value)
    for k, v in sorted(entry.extra.items()):
        table.add_row(k, v)
    table.add_row("links", "\n".join(entry.links))
    table.add_row("summary", entry.summary)
    out.print(table)
    variants = Table("source", "file", "summary variant", title=f"Appearances ({len(appearances)})")
    for a in appearances:
        text = a.summary if len(a.summary) <= 160 else a.summary[:157] + "..."
        variants.add_row(str(a.source_id), display_path(a.path), text)
    out.print(variants)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
