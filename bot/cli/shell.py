"""CLI shell: the Typer app, the consoles, the context every command gets, and the
helpers several command groups share.  Prints data literally (no Rich markup).
Never holds business logic: commands call the service functions."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from enum import Enum, StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
from rich.console import Console

from bot.cli.troubles import opened, shown_store
from bot.domain import IngestResult, SourceStatus
from bot.domain.text import plural as plural  # re-exported: every command module counts things

if TYPE_CHECKING:  # imported where used: every command pays for what it imports here
    from rich.table import Table
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from bot.choose.tagging import TagRules
    from bot.config import Settings


def command_group(help: str) -> typer.Typer:
    """A group of commands.  Help and usage errors are plain text: Rich's boxes cost
    start-up time on every call and its type labels (``<bool>``) read as values."""
    return typer.Typer(help=help, no_args_is_help=True, rich_markup_mode=None, add_completion=False)


app = typer.Typer(
    help="digestbot: research-feed digest dumps in, personal daily emails out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


# Data is printed as it is: no Rich markup ("[bold]" in a title), no emoji codes
# (":x:" in "root:x:0"), no highlighting.
out = Console(highlight=False, soft_wrap=False, markup=False, emoji=False)


# soft_wrap: an error stays one line, whatever the terminal width.
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)


EXIT_INPUT_FAILED, EXIT_USAGE = 1, 2  # and 0 for success


JsonOption = Annotated[bool, typer.Option("--json", help="One JSON object per line instead of a table.")]


class LogFormatChoice(StrEnum):
    TEXT = "text"
    JSON = "json"


@dataclass
class Context:
    """What every command needs: settings, tag rules and a store, each loaded once on
    first use (``--help`` and ``init`` need none of them)."""

    config_path: Path | None = None
    verbosity: int = 0
    log_format: Literal["text", "json"] = "text"
    _settings: Settings | None = None
    _engine: Engine | None = None
    _rules: TagRules | None = None

    @property
    def settings(self) -> Settings:
        from bot.config import ConfigError, load_settings

        if self._settings is None:
            try:
                settings = load_settings(self.config_path)
                if settings.dkim.domain:  # a DKIM key that cannot sign stops every command at once
                    from bot.mail.dkim import signer_of

                    signer_of(settings.dkim)
                self._settings = settings
            except ConfigError as exc:
                fail(str(exc), EXIT_USAGE)
        return self._settings

    @property
    def rules(self) -> TagRules:
        from bot.choose.tagging import TagRulesError, load_rules

        if self._rules is None:
            try:
                self._rules = load_rules(self.settings.paths.tags_file)
            except TagRulesError as exc:
                fail(str(exc), EXIT_USAGE)
        return self._rules

    @property
    def engine(self) -> Engine:
        from bot.store import engine as store_engine

        if self._engine is None:
            opened(self.settings.database_url)
            database = self.settings.database
            engine = store_engine.make_engine(
                self.settings.database_url,
                busy_timeout_ms=database.busy_timeout_ms,
                sqlite_cache_mb=database.sqlite_cache_mb,
            )
            self._hold(engine)
            self._engine = engine
        return self._engine

    @staticmethod
    def _hold(engine: Engine) -> None:
        """Hold a SQLite store open for this process (``bot.store.holders``): refused
        while a restore or copy has it, and when its file was emptied (SQLite would
        take an empty file for a new store, and every reader with it)."""
        from bot.store.holders import StoreInUse, emptied, hold

        database = engine.url.database
        if engine.dialect.name != "sqlite" or not database or database == ":memory:":
            return
        path = Path(database)
        try:
            hold(path)
        except StoreInUse as exc:
            engine.dispose()
            fail(str(exc))
        if emptied(path):
            engine.dispose()
            fail(
                f"{path}: the store is an empty file, and digestbot used it before: it was truncated. Restore a "
                "backup ('digestbot db restore FILE'), or move it aside to start a new store",
                EXIT_USAGE,
            )

    def signing_key(self) -> bytes:
        """The key links are signed with, checked against the one the store remembers
        (``bot.tokens.store_signing_key``): a usage error when they differ."""
        from bot.config import ConfigError
        from bot.tokens import store_signing_key

        try:
            return store_signing_key(self.settings, self.sessions())
        except ConfigError as exc:
            fail(str(exc), EXIT_USAGE)

    def close(self) -> None:
        """Close what the command opened (the store, its unsubscribe journal), as the
        end of the process would: for a command run inside a longer-lived one."""
        if self._engine is not None:
            from bot.unsubscribes import close_journal

            close_journal(self._engine.url.render_as_string(hide_password=False))
            self._engine.dispose()
            self._engine = None

    @property
    def dump_dir(self) -> Path:
        """The folder the watcher scans; a usage error when it is not there, so a typo
        in the config is not mistaken for "nothing new"."""
        folder = self.settings.paths.dump_dir
        if not folder.is_dir():
            fail(f"paths.dump_dir: {folder} is not a folder (it does not exist or is a file)", EXIT_USAGE)
        return folder

    def log_as_daemon(self) -> None:
        """A long-running process logs each event that matters (INFO) by default."""
        from bot import logs

        logs.configure(self.verbosity, self.log_format, daemon=True)

    def check_watch_inputs(self) -> None:
        """Exit with a usage error, before anything starts, when the dump folder or the
        tag rules a watching process needs cannot be read."""
        _ = self.dump_dir, self.rules

    def sessions(self, *, migrate: bool = True) -> sessionmaker[Session]:
        """Sessions on an up-to-date schema: SQLite is migrated on start, other
        databases must have been migrated with ``digestbot db upgrade``."""
        from bot.store import engine as store_engine

        if migrate and store_engine.is_sqlite(self.engine):
            self.upgrade_store()
        elif migrate:
            current = self._known_revision()
            if current != store_engine.HEAD_REVISION:
                fail(f"database schema is at {current or 'nothing'}; run 'digestbot db upgrade'", EXIT_USAGE)
        return store_engine.sessions(self.engine)

    def upgrade_store(self) -> None:
        """Bring the store to this digestbot's schema; a newer one, or one it does not
        know, is refused in one line and left as it is."""
        from bot.store import engine as store_engine

        current = self._known_revision()
        if current != store_engine.HEAD_REVISION:
            self._upgrade(current)

    def _known_revision(self) -> str | None:
        from bot.store import engine as store_engine

        current = store_engine.current_revision(self.engine)
        if current is not None and current > store_engine.HEAD_REVISION:
            fail(
                f"{shown_store()}: its schema is {current}, newer than this digestbot's "
                f"{store_engine.HEAD_REVISION}: upgrade digestbot, or restore a backup taken before",
                EXIT_USAGE,
            )
        return current

    def _upgrade(self, current: str | None) -> None:
        from alembic.util import CommandError

        from bot.store import engine as store_engine

        try:
            store_engine.upgrade(self.engine)
        except CommandError:  # a revision Alembic does not know: nothing was changed
            fail(
                f"{shown_store()}: its schema is {current!r}, which this digestbot does not know: "
                "restore a backup, or run the digestbot that wrote it",
                EXIT_USAGE,
            )


def fail(message: str, code: int = EXIT_INPUT_FAILED) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(code)


def ctx_of(ctx: typer.Context) -> Context:
    return ctx.ensure_object(Context)


def jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def print_json_lines(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        sys.stdout.write(json.dumps(jsonable(row), ensure_ascii=False, sort_keys=False) + "\n")


def display_path(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def _print_version(asked: bool) -> None:
    if asked:
        from bot import __version__

        out.print(f"digestbot {__version__}", markup=False)
        raise typer.Exit(0)


@app.callback()
def main_callback(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file (default: $DIGESTBOT_CONFIG or config/digestbot.toml)."),
    ] = None,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="Log more to stderr: -v events, -vv debug.")
    ] = 0,
    log_format: Annotated[
        LogFormatChoice, typer.Option("--log-format", help="Log lines as text or as JSON objects (log shippers).")
    ] = LogFormatChoice.TEXT,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit."),
    ] = False,
) -> None:
    from bot import logs

    logs.configure(verbose, log_format.value)
    ctx.obj = Context(config, verbosity=verbose, log_format=log_format.value)
    ctx.call_on_close(ctx.obj.close)


def now() -> datetime:
    from bot.ingest.service import utcnow

    return utcnow()


# The largest row id and row count the store takes (SQLite and PostgreSQL integers are 64-bit).
MAX_ID = 2**63 - 1
MAX_ROWS = 1_000_000_000
# Days the commands take: wide of any real one, narrow enough that a week's arithmetic
# and a time zone's offset around them stay within what dates can hold.
FIRST_DAY, LAST_DAY = date(1900, 1, 1), date(9000, 12, 31)


def parse_date(value: str | None, option: str = "--since") -> date | None:
    if value is None:
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)", param_hint=option) from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise typer.BadParameter(f"{value!r} is not between {FIRST_DAY} and {LAST_DAY}", param_hint=option)
    return day


# The subscriber fields as the command line names them (``clean_fields`` errors start
# with the field, as CSV rows and forms name it).
_FIELD_OPTIONS = {"send_hour": "--hour", "timezone": "--tz", "filter": "--filter", "name": "--name"}
_FIELD_OPTIONS |= {"backfill": "--backfill", "cadence": "--cadence", "email": "EMAIL"}


def clean_or_exit(email: str, **fields: Any) -> Any:
    from bot.subscribers.subscriptions import SubscriberInputError, clean_fields

    try:
        return clean_fields(email, **fields)
    except SubscriberInputError as exc:
        field, colon, reason = str(exc).partition(": ")
        fail(f"{_FIELD_OPTIONS[field]}: {reason}" if colon and field in _FIELD_OPTIONS else str(exc), EXIT_USAGE)


def find_subscriber(factory: Any, email: str) -> Any:
    """The subscriber with this address, or exit 1 saying there is none."""
    from bot.subscribers.subscriptions import SubscriberNotFound, find

    try:
        return find(factory, email)
    except SubscriberNotFound as exc:
        fail(str(exc))


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


def report_ingest(results: list[IngestResult], as_json: bool, *, left: int = 0) -> None:
    """What each file or feed did; *left*: files a folder scan left for later (the
    caller says which and why)."""
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
            entries = plural(r.entries, "entry", "entries")
            out.print(f"{display_path(r.path)}: {entries}, {r.new} new, {r.updated} updated", markup=False)
    if not results and not left:
        out.print("nothing new to ingest")


def new_table(*columns: str, **options: Any) -> Table:
    """A Rich table (imported on first use: most commands print none)."""
    from rich.table import Table

    return Table(*columns, **options)
