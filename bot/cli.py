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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.config import ConfigError, Settings, load_settings
from bot.domain import DigestState, IngestResult, SourceStatus, SubscriberStatus
from bot.store import engine as store_engine
from bot.tagging import TagRules, TagRulesError, load_rules
from bot.text import is_utf8_name

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
subscribers_app = typer.Typer(help="Manage subscribers: add, import, edit, pause, remove.", no_args_is_help=True)
tags_app = typer.Typer(help="Tags and tag rules: counts, test a filter, re-apply rules.", no_args_is_help=True)
app.add_typer(dumps_app, name="dumps")
app.add_typer(entries_app, name="entries")
app.add_typer(feeds_app, name="feeds")
app.add_typer(db_app, name="db")
app.add_typer(config_app, name="config")
app.add_typer(subscribers_app, name="subscribers")
app.add_typer(tags_app, name="tags")

# Data is printed as it is: no Rich markup ("[bold]" in a title), no emoji codes
# (":x:" in "root:x:0"), no highlighting.
out = Console(highlight=False, soft_wrap=False, markup=False, emoji=False)
# soft_wrap: an error stays one line, whatever the terminal width.
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)

EXIT_INPUT_FAILED, EXIT_USAGE = 1, 2  # and 0 for success

JsonOption = Annotated[bool, typer.Option("--json", help="One JSON object per line instead of a table.")]


@dataclass
class Context:
    """What every command needs: settings (loaded once) and a lazily opened store."""

    settings: Settings
    _engine: Engine | None = None
    _rules: TagRules | None = None

    @property
    def rules(self) -> TagRules:
        if self._rules is None:
            try:
                self._rules = load_rules(self.settings.paths.tags_file)
            except TagRulesError as exc:
                fail(str(exc), EXIT_USAGE)
        return self._rules

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            database = self.settings.database
            self._engine = store_engine.make_engine(
                self.settings.database_url,
                busy_timeout_ms=database.busy_timeout_ms,
                sqlite_cache_mb=database.sqlite_cache_mb,
            )
        return self._engine

    def sessions(self, *, migrate: bool = True) -> sessionmaker[Session]:
        """Sessions on an up-to-date schema: SQLite is migrated on start, other
        databases must have been migrated with ``digestbot db upgrade``."""
        if migrate:
            current = store_engine.current_revision(self.engine)
            if current != store_engine.HEAD_REVISION:
                if store_engine.is_sqlite(self.engine):
                    store_engine.upgrade(self.engine)
                else:
                    fail(f"database schema is at {current or 'nothing'}; run 'digestbot db upgrade'", EXIT_USAGE)
        return store_engine.sessions(self.engine)


def fail(message: str, code: int = EXIT_INPUT_FAILED) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(code)


def ctx_of(ctx: typer.Context) -> Context:
    return ctx.ensure_object(Context)


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
        Path | None,
        typer.Option("--config", "-c", help="Config file (default: $DIGESTBOT_CONFIG or config/digestbot.toml)."),
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
            out.print(f"{display_path(r.path)}: {r.entries} entries, {r.new} new, {r.updated} updated", markup=False)
    if not results:
        out.print("nothing new to ingest")


@dumps_app.command("ingest")
def dumps_ingest(
    ctx: typer.Context,
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Dump or feed files, or folders (default: the dump folder).")
    ] = None,
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
        limit = c.settings.watch.max_file_bytes
        results = [ingest_file(factory, p, rules=c.rules, max_bytes=limit) for p in expand(paths)]
    else:
        results = scan_folder(
            factory,
            c.settings.paths.dump_dir,
            quiet_seconds=c.settings.watch.quiet_seconds,
            rules=c.rules,
            max_bytes=c.settings.watch.max_file_bytes,
        )
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
    results = fetch_feeds(c.sessions(), c.settings, urls=urls or None, rules=c.rules)
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


def _parse_date(value: str | None, option: str = "--since") -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)", param_hint=option) from None


@entries_app.command("list")
def entries_list(
    ctx: typer.Context,
    tag: Annotated[str | None, typer.Option(help="Only entries with this tag (any origin, case-insensitive).")] = None,
    since: Annotated[
        str | None, typer.Option(help="Only entries first seen on or after this date (YYYY-MM-DD).")
    ] = None,
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


# --- subscribers ------------------------------------------------------------

NameOption = Annotated[str | None, typer.Option("--name", help="Display name.")]
FilterOption = Annotated[
    str | None,
    typer.Option("--filter", help="Filter, e.g. 'gpu and (llm or moe) and not snn', '\"sparse attention\"', '*'."),
]
TzOption = Annotated[str | None, typer.Option("--tz", help="IANA time zone, e.g. Europe/Berlin.")]
HourOption = Annotated[int | None, typer.Option("--hour", help="Local hour (0-23) to send the daily digest.")]
BackfillOption = Annotated[
    str | None,
    typer.Option(
        "--backfill", help="What a new subscriber gets first: '7d' (entries of the last 7 days), 'all', 'none'."
    ),
]


def _now() -> datetime:
    from bot.ingest import utcnow

    return utcnow()


def _clean(email: str, **fields: Any) -> Any:
    from bot.subscribers import SubscriberInputError, clean_fields

    try:
        return clean_fields(email, **fields)
    except SubscriberInputError as exc:
        fail(str(exc), EXIT_USAGE)


def _find_subscriber(factory: Any, email: str) -> Any:
    """The subscriber with this address, or exit 1 saying there is none."""
    from bot.subscribers import SubscriberNotFound, find

    try:
        return find(factory, email)
    except SubscriberNotFound as exc:
        fail(str(exc))


def _subscriber_json(s: Any) -> dict[str, Any]:
    return {
        "email": s.email,
        "name": s.name,
        "filter": s.filter,
        "timezone": s.timezone,
        "send_hour": s.send_hour,
        "status": s.status,
        "backfill": s.backfill,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    }


def _subscriber_table(subscribers: list[Any], title: str) -> Table:
    table = Table(title=title)
    table.add_column("email", no_wrap=True)
    for column in ("name", "filter", "zone", "hour", "status"):
        table.add_column(column)
    for s in subscribers:
        table.add_row(s.email, s.name, s.filter, s.timezone, f"{s.send_hour:02d}:00", s.status.value)
    return table


@subscribers_app.command("add")
def subscribers_add(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="Email address (IDN domains accepted).")],
    name: NameOption = None,
    filter: FilterOption = None,
    tz: TzOption = None,
    hour: HourOption = None,
    backfill: BackfillOption = None,
) -> None:
    """Subscribe EMAIL (an unsubscribed address is re-activated; what it was sent stays sent)."""
    from bot.subscribers import AlreadySubscribed, add

    c = ctx_of(ctx)
    fields = _clean(email, name=name, filter=filter, timezone=tz, send_hour=hour, backfill=backfill)
    try:
        subscriber, created = add(c.sessions(), c.settings, fields, _now())
    except AlreadySubscribed as exc:
        fail(str(exc))
        return
    out.print(
        f"{'added' if created else 're-subscribed'} {subscriber.email} (filter: {subscriber.filter})", markup=False
    )


@subscribers_app.command("edit")
def subscribers_edit(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    name: NameOption = None,
    filter: FilterOption = None,
    tz: TzOption = None,
    hour: HourOption = None,
    backfill: BackfillOption = None,
) -> None:
    """Change the given fields of a subscriber."""
    from bot.subscribers import SubscriberNotFound, edit

    c = ctx_of(ctx)
    fields = _clean(email, name=name, filter=filter, timezone=tz, send_hour=hour, backfill=backfill)
    try:
        subscriber = edit(c.sessions(), c.settings, fields, _now())
    except SubscriberNotFound as exc:
        fail(str(exc))
        return
    out.print(_subscriber_table([subscriber], "Updated"))


def _set_status(ctx: typer.Context, email: str, status: Any, verb: str) -> None:
    from bot.subscribers import SubscriberInputError, SubscriberNotFound, change_status, clean_email

    c = ctx_of(ctx)
    try:
        subscriber = change_status(c.sessions(), clean_email(email), status, _now())
    except SubscriberInputError as exc:
        fail(str(exc), EXIT_USAGE)
        return
    except SubscriberNotFound as exc:
        fail(str(exc))
        return
    out.print(f"{verb} {subscriber.email}", markup=False)


@subscribers_app.command("pause")
def subscribers_pause(
    ctx: typer.Context, email: Annotated[str, typer.Argument(help="The subscriber's address.")]
) -> None:
    """Stop sending digests to EMAIL until resumed (nothing is lost meanwhile)."""
    _set_status(ctx, email, SubscriberStatus.PAUSED, "paused")


@subscribers_app.command("resume")
def subscribers_resume(
    ctx: typer.Context, email: Annotated[str, typer.Argument(help="The subscriber's address.")]
) -> None:
    """Send digests to EMAIL again (also clears a bounce once the address is fixed)."""
    _set_status(ctx, email, SubscriberStatus.ACTIVE, "resumed")


@subscribers_app.command("remove")
def subscribers_remove(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    purge: Annotated[
        bool, typer.Option("--purge", help="Really delete the subscriber and their history (privacy requests).")
    ] = False,
) -> None:
    """Unsubscribe EMAIL, keeping what was sent so a re-subscribe never resends old entries."""
    from bot.subscribers import SubscriberInputError, SubscriberNotFound, clean_email, remove

    c = ctx_of(ctx)
    try:
        subscriber = remove(c.sessions(), clean_email(email), purge=purge, now=_now())
    except SubscriberInputError as exc:
        fail(str(exc), EXIT_USAGE)
        return
    except SubscriberNotFound as exc:
        fail(str(exc))
        return
    out.print(f"{'purged' if purge else 'unsubscribed'} {subscriber.email}", markup=False)


@subscribers_app.command("import")
def subscribers_import(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(help="CSV with a header; columns: email, name, filter, timezone, send_hour, status, backfill."),
    ],
    as_json: JsonOption = False,
) -> None:
    """Upsert subscribers from CSV (idempotent).  Good rows are imported even when
    others are bad; every bad row is listed with its line number.  Exit 1 if any was bad."""
    from bot.subscribers import import_csv

    c = ctx_of(ctx)
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{file}: cannot read: {exc}", EXIT_INPUT_FAILED)
        return
    report = import_csv(c.sessions(), c.settings, text, _now())
    if as_json:
        print_json_lines(
            [{"created": report.created, "updated": report.updated, "bad_rows": len(report.errors)}]
            + [{"line": e.line, "error": e.reason} for e in report.errors]
        )
    else:
        out.print(
            f"{file}: {report.created} added, {report.updated} updated, {len(report.errors)} bad rows", markup=False
        )
        if report.errors:
            table = Table("line", "reason", title="Bad rows (not imported)")
            for e in report.errors:
                table.add_row(str(e.line), e.reason)
            err.print(table)
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
) -> None:
    """Print all subscribers as CSV, exactly as stored: the format 'import' reads."""
    from bot.subscribers import export_csv

    sys.stdout.write(export_csv(ctx_of(ctx).sessions(), status, spreadsheet=spreadsheet))


@subscribers_app.command("list")
def subscribers_list(
    ctx: typer.Context,
    status: Annotated[SubscriberStatus | None, typer.Option(help="Only subscribers with this status.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only subscribers whose filter names this tag.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Subscribers, by address."""
    from bot.filters import Tag, atoms, parse_filter
    from bot.store.subscribers import list_subscribers

    with ctx_of(ctx).sessions()() as session:
        subscribers = list_subscribers(session, status=status)
    if tag is not None:
        wanted = Tag(tag.casefold())
        subscribers = [s for s in subscribers if wanted in atoms(parse_filter(s.filter))]
    if as_json:
        print_json_lines([_subscriber_json(s) for s in subscribers])
        return
    out.print(_subscriber_table(subscribers, f"Subscribers ({len(subscribers)})"))


@subscribers_app.command("show")
def subscribers_show(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    as_json: JsonOption = False,
) -> None:
    """One subscriber's settings and their last digests."""
    from bot.store.digests import list_digests

    factory = ctx_of(ctx).sessions()
    subscriber = _find_subscriber(factory, email)
    with factory() as session:
        digests = list_digests(session, subscriber_id=subscriber.id, limit=10)
    if as_json:
        data = _subscriber_json(subscriber)
        data["last_digests"] = [_digest_json(d) for d in digests]
        print_json_lines([data])
        return
    table = Table(show_header=False, box=None, title=subscriber.email)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in _subscriber_json(subscriber).items():
        table.add_row(key.replace("_", " "), str(_jsonable(value)))
    out.print(table)
    out.print(_digest_table(digests, "Last digests"))


# --- tags -------------------------------------------------------------------


@tags_app.command("list")
def tags_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every tag with its number of entries (per origin) and its rule's description."""
    from bot.store.entries import tag_counts

    c = ctx_of(ctx)
    descriptions = {r.name: r.description for r in c.rules.rules}
    with c.sessions()() as session:
        counts = tag_counts(session)
    rule_only = [r for r in c.rules.rules if r.name not in {label.casefold() for label, _, _ in counts}]
    rows = [(label, total, origins, descriptions.get(label.casefold(), "")) for label, total, origins in counts]
    rows += [(r.label, 0, {}, r.description) for r in rule_only]
    if as_json:
        print_json_lines(
            [
                {"tag": t, "entries": n, "by_origin": o, "rule": t.casefold() in descriptions, "description": d}
                for t, n, o, d in rows
            ]
        )
        return
    table = Table("tag", "entries", "header", "category", "rule", "description", title=f"Tags ({len(rows)})")
    for t, n, o, d in rows:
        table.add_row(t, str(n), str(o.get("header", "")), str(o.get("category", "")), str(o.get("rule", "")), d)
    out.print(table)


@tags_app.command("test")
def tags_test(
    ctx: typer.Context,
    expression: Annotated[str, typer.Argument(help="A filter expression, e.g. 'gpu and not snn'.")],
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many.")] = None,
    as_json: JsonOption = False,
) -> None:
    """The stored entries a filter matches, best first, with why."""
    from bot.filters import FilterError, parse_filter, to_text
    from bot.select import matching

    c = ctx_of(ctx)
    try:
        expr = parse_filter(expression)
    except FilterError as exc:
        fail(str(exc), EXIT_USAGE)
        return
    with c.sessions()() as session:
        found = matching(session, expr, c.rules, limit=limit)
    _print_candidates(found, f"{to_text(expr)}: {len(found)} entries", as_json)


def _print_candidates(found: list[Any], title: str, as_json: bool) -> None:
    if as_json:
        print_json_lines(
            [
                {
                    "key": f.entry.key,
                    "title": f.entry.title,
                    "score": f.explanation.score,
                    "why": f.explanation.why(),
                    "hits": [{"atom": h.atom, "where": h.where} for h in f.explanation.hits],
                    "tags": f.entry.tags,
                    "first_seen_at": f.entry.first_seen_at,
                }
                for f in found
            ]
        )
        return
    table = Table("score", "key", "title", "why", title=title)
    for f in found:
        table.add_row(str(f.explanation.score), f.entry.key, f.entry.title, f.explanation.why())
    out.print(table)


@tags_app.command("apply")
def tags_apply(ctx: typer.Context) -> None:
    """Recompute rule tags of every stored entry from the current tags file."""
    from bot.ingest import retag_all
    from bot.store.entries import count_entries

    c = ctx_of(ctx)
    factory = c.sessions()
    with factory() as session:
        total = count_entries(session)
    with progress_bar("re-tagging", total) as advance:
        done = retag_all(factory, c.rules, progress=advance)
    out.print(f"re-tagged {done} entries with {len(c.rules)} rules from {c.settings.paths.tags_file}", markup=False)


@contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A Rich progress bar on a terminal; plain lines (every 10%) otherwise."""
    if out.is_terminal:
        from rich.progress import Progress

        with Progress(console=err, transient=True) as bar:
            task = bar.add_task(label, total=total)
            yield lambda n: bar.advance(task, n)
        return
    state = {"done": 0, "shown": -1}

    def advance(n: int) -> None:
        state["done"] += n
        tenth = state["done"] * 10 // max(total, 1)
        if tenth != state["shown"]:
            state["shown"] = tenth
            err.print(f"{label}: {state['done']}/{total}", markup=False)

    yield advance


# --- preview ------------------------------------------------------------------


@app.command("preview")
def preview(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    date_: Annotated[
        str | None, typer.Option("--date", help="As of this day's send time (YYYY-MM-DD; default: now).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """What EMAIL's next digest would contain and why; sends and records nothing."""
    from bot.select import local_send_time, select_for
    from bot.store.digests import claimed_entry_ids

    c = ctx_of(ctx)
    factory = c.sessions()
    subscriber = _find_subscriber(factory, email)
    day = _parse_date(date_, "--date")
    as_of = local_send_time(subscriber, day) if day else _now()
    with factory() as session:
        found = select_for(session, subscriber, c.rules, as_of=as_of, exclude=claimed_entry_ids(session, subscriber.id))
    label = (
        f"{subscriber.email} ({subscriber.status.value}) as of {as_of:%Y-%m-%d %H:%M} UTC, filter {subscriber.filter}"
    )
    _print_candidates(found, f"{label}: {len(found)} entries", as_json)


# --- digests -------------------------------------------------------------------


def _report_delivery(report: Any) -> None:
    out.print(
        f"sent {report.sent}, retrying {report.retrying}, failed {report.failed}, bounced {report.bounced}, "
        f"cancelled {report.cancelled}",
        markup=False,
    )


def _deliver_with_progress(c: Context, factory: Any) -> Any:
    import asyncio

    from bot.digests import deliver_now, due_count

    total = due_count(factory, _now())
    with progress_bar("sending", total) as advance:
        return asyncio.run(deliver_now(factory, c.settings, clock=_now, progress=advance))


@app.command("run")
def run_command(
    ctx: typer.Context,
    once: Annotated[bool, typer.Option("--once", help="One full cycle (watch, plan, deliver), then exit.")] = False,
    all_due: Annotated[
        bool, typer.Option("--all-due", help="With --once: treat every active subscriber as due now.")
    ] = False,
) -> None:
    """The daemon, both roles in one process (the single-machine default): watch the
    dump folder and feeds, plan digests at each subscriber's local send time, deliver
    them.  SIGTERM/Ctrl-C: finish in-flight sends, exit 0."""

    from bot.digests import plan
    from bot.watcher import fetch_feeds, scan_folder

    c = ctx_of(ctx)
    factory = c.sessions()
    if all_due and not once:
        fail("--all-due only goes with --once", EXIT_USAGE)
    if not once:
        _daemon(c, factory, plan_jobs=True, deliver_jobs=True)
        return
    results = scan_folder(
        factory,
        c.settings.paths.dump_dir,
        quiet_seconds=c.settings.watch.quiet_seconds,
        rules=c.rules,
        max_bytes=c.settings.watch.max_file_bytes,
    )
    if c.settings.feeds.urls:
        results += fetch_feeds(factory, c.settings, rules=c.rules)
    _report(results, False)
    planned = plan(factory, c.settings, c.rules, now=_now(), all_due=all_due)
    out.print(
        f"planned {len(planned.planned)} digests ({planned.empty} with nothing new, {planned.not_due} not due yet)"
    )
    _report_delivery(_deliver_with_progress(c, factory))
    if any(r.status is SourceStatus.FAILED for r in results):
        raise typer.Exit(EXIT_INPUT_FAILED)


def _daemon(c: Context, factory: Any, *, plan_jobs: bool, deliver_jobs: bool) -> None:
    import asyncio

    from bot.roles import RoleTaken
    from bot.scheduler import Daemon

    try:
        daemon = Daemon(factory, c.settings, c.rules, engine=c.engine, plan_jobs=plan_jobs, deliver_jobs=deliver_jobs)
    except RoleTaken as exc:
        fail(str(exc))
        return
    asyncio.run(daemon.run())


@app.command("scheduler")
def scheduler_command(ctx: typer.Context) -> None:
    """The scheduler role only: watch dumps and feeds, plan digests.  Several may run;
    one is elected (PostgreSQL advisory lock), the others stand by and take over."""
    c = ctx_of(ctx)
    _daemon(c, c.sessions(), plan_jobs=True, deliver_jobs=False)


@app.command("worker")
def worker_command(ctx: typer.Context) -> None:
    """The worker role only: deliver due digests.  On PostgreSQL run as many as you
    like (they claim disjoint batches); on SQLite exactly one."""
    c = ctx_of(ctx)
    _daemon(c, c.sessions(), plan_jobs=False, deliver_jobs=True)


@app.command("serve")
def serve_command(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", help="Listen address (default: web.listen_host).")] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=1, max=65535, help="Port (default: web.listen_port).")
    ] = None,
) -> None:
    """The subscriber endpoint: one-click unsubscribe (RFC 8058) and the manage page
    behind the links in every digest.  Put it behind HTTPS at web.public_url."""
    from bot.web import serve

    c = ctx_of(ctx)
    web = c.settings.web
    if not web.public_url:
        err.print("note: web.public_url is empty, so digests carry only mailto: unsubscribe links, not links here")
    serve(c.settings, c.sessions(), host=host or web.listen_host, port=port or web.listen_port)


@app.command("send-now")
def send_now(
    ctx: typer.Context,
    emails: Annotated[list[str] | None, typer.Argument(help="Subscribers (default: every active one).")] = None,
) -> None:
    """Send each given subscriber a digest now with what they have not been sent yet
    (outside the daily schedule; entries sent now are not sent again)."""
    from bot.digests import plan
    from bot.domain import DigestKind

    c = ctx_of(ctx)
    factory = c.sessions()
    chosen = [_find_subscriber(factory, e) for e in emails] if emails else None
    planned = plan(factory, c.settings, c.rules, now=_now(), subscribers=chosen, kind=DigestKind.MANUAL)
    out.print(f"queued {len(planned.planned)} digests ({planned.empty} subscribers had nothing new)")
    _report_delivery(_deliver_with_progress(c, factory))


@app.command("resend")
def resend_command(
    ctx: typer.Context,
    digest_id: Annotated[int | None, typer.Argument(help="The digest to send again.")] = None,
    subscriber: Annotated[
        str | None, typer.Option("--subscriber", help="With --date: that subscriber's scheduled digest.")
    ] = None,
    date_: Annotated[str | None, typer.Option("--date", help="The local day of the digest (YYYY-MM-DD).")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Resend every failed digest.")] = False,
) -> None:
    """Send a digest again: same entries and summaries, marked as a resend; the
    ledger does not change."""
    from bot.digests import DigestNotFound, ResendPending, find_scheduled, resend, resend_failed

    c = ctx_of(ctx)
    factory = c.sessions()
    targets: list[int] = []
    if failed:
        queued = resend_failed(factory, c.settings, now=_now())
        out.print(f"queued {len(queued)} resends: {', '.join(f'#{q}' for q in queued) or 'none'}")
        _report_delivery(_deliver_with_progress(c, factory))
        return
    if digest_id is not None:
        targets = [digest_id]
    elif subscriber and date_:
        day = _parse_date(date_, "--date")
        assert day is not None
        found = find_scheduled(factory, _find_subscriber(factory, subscriber).id, day)
        if found is None:
            fail(f"no scheduled digest for {subscriber} on {date_}")
            return
        targets = [found.id]
    else:
        fail("give DIGEST_ID, --subscriber EMAIL --date D, or --failed", EXIT_USAGE)
    try:
        queued = [resend(factory, c.settings, t, now=_now()) for t in targets]
    except (DigestNotFound, ResendPending) as exc:
        fail(str(exc))
        return
    out.print(f"queued {len(queued)} resends: {', '.join(f'#{q}' for q in queued) or 'none'}")
    _report_delivery(_deliver_with_progress(c, factory))


def _digest_json(d: Any) -> dict[str, Any]:
    return {
        "id": d.id,
        "subscriber": d.subscriber_email,
        "local_date": d.local_date,
        "kind": d.kind,
        "state": d.state,
        "entries": d.entry_count,
        "attempts": d.attempts,
        "smtp_code": d.smtp_code,
        "error": d.last_error,
        "message_id": d.message_id,
        "planned_at": d.planned_at,
        "sent_at": d.sent_at,
        "resend_of": d.resend_of,
    }


def _digest_table(digests: list[Any], title: str) -> Table:
    table = Table("id", "subscriber", "day", "kind", "state", "entries", "tries", "error", title=title)
    for d in digests:
        kind = f"resend of #{d.resend_of}" if d.resend_of else d.kind.value
        table.add_row(
            str(d.id),
            d.subscriber_email,
            d.local_date.isoformat(),
            kind,
            d.state.value,
            str(d.entry_count),
            str(d.attempts),
            d.last_error or "",
        )
    return table


@app.command("history")
def history(
    ctx: typer.Context,
    email: Annotated[str | None, typer.Argument(help="Only this subscriber.")] = None,
    status: Annotated[DigestState | None, typer.Option("--status", help="Only digests in this state.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many (newest first).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Digests, newest first: who, which day, state, entries, attempts, last error."""
    from bot.store.digests import list_digests

    c = ctx_of(ctx)
    factory = c.sessions()
    subscriber_id = _find_subscriber(factory, email).id if email else None
    with factory() as session:
        digests = list_digests(session, subscriber_id=subscriber_id, state=status, limit=limit)
    if as_json:
        print_json_lines([_digest_json(d) for d in digests])
        return
    out.print(_digest_table(digests, f"Digests ({len(digests)})"))


@app.command("stats")
def stats(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Per local day: digests planned, sent, failed, bounced (and the rest).  A failed
    digest whose resend was delivered counts as sent; 'resent' counts delivered resends."""
    from bot.store.digests import bounced_by_day, stats_by_day

    with ctx_of(ctx).sessions()() as session:
        days = stats_by_day(session)
        bounced = bounced_by_day(session)
    rows: list[dict[str, Any]] = []
    for day, states in days:
        planned = sum(n for s, n in states.items() if s not in ("empty", "resent"))
        rows.append(
            {
                "day": day,
                "planned": planned,
                "sent": states.get("sent", 0),
                "failed": states.get("failed", 0),
                "bounced": bounced.get(day, 0),
                "pending": sum(states.get(s, 0) for s in ("queued", "sending", "retry_wait")),
                "empty": states.get("empty", 0),
                "resent": states.get("resent", 0),
            }
        )
    if as_json:
        print_json_lines(rows)
        return
    table = Table("day", "planned", "sent", "failed", "bounced", "pending", "empty", "resent", title="Digests per day")
    for r in rows:
        table.add_row(
            r["day"].isoformat(),
            *(str(r[k]) for k in ("planned", "sent", "failed", "bounced", "pending", "empty", "resent")),
        )
    out.print(table)


@app.command("demo")
def demo(ctx: typer.Context) -> None:
    """Replay seeds/ one day at a time into a local SMTP sink: var/inbox/*.eml + index.html."""
    from bot.demo import run_demo

    c = ctx_of(ctx)
    csv_path = Path("config/subscribers.example.csv")
    if not csv_path.is_file():
        fail(f"{csv_path}: not found (run the demo from the project folder)", EXIT_USAGE)
    rows, inbox = run_demo(c.settings, c.rules, subscribers_csv=csv_path)
    table = Table(
        "day", "dump", "subscriber", "entries", "status", title="Seed replay: one digest per subscriber and day"
    )
    for r in rows:
        table.add_row(str(r.day), r.dump, r.subscriber, str(r.entries), r.status)
    out.print(table)
    count = len(list(inbox.glob("*.eml")))
    out.print(f"{count} messages in {inbox}/ (open {inbox / 'index.html'} in a browser)", markup=False)


def main() -> None:
    for position, argument in enumerate(sys.argv[1:], start=1):
        if not is_utf8_name(argument):  # the shell passed bytes that are not UTF-8
            shown = argument.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            err.print(f"error: argument {position} is not valid UTF-8: {shown!r}", markup=False)
            raise SystemExit(EXIT_USAGE)
    app()


if __name__ == "__main__":
    main()
