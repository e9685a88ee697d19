"""CLI shell: the Typer app and its global options, the context each command gets
(``context``), and what several command groups parse alike: dates, row ids, a
subscriber's address and fields.  Never holds business logic: commands call the
service functions; what they print goes through ``output``."""

from __future__ import annotations

from datetime import date, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.context import Context
from bot.cli.output import EXIT_USAGE, fail, out

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from bot.cli.choice_options import DigestChoices
    from bot.domain import Subscriber, SubscriberFields


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


JsonOption = Annotated[bool, typer.Option("--json", help="One JSON object per line instead of a table.")]


class LogFormatChoice(StrEnum):
    TEXT = "text"
    JSON = "json"


def ctx_of(ctx: typer.Context) -> Context:
    return ctx.ensure_object(Context)


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
    from bot.ingest.storing import utcnow

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


def clean_or_exit(email: str, choices: DigestChoices | None = None) -> SubscriberFields:
    """The subscriber's fields as the service cleans them, or a usage error naming the option."""
    import dataclasses

    from bot.cli.choice_options import DigestChoices
    from bot.subscribers.fields import SubscriberInputError, clean_fields, clean_settings

    given = choices or DigestChoices()
    try:
        fields = clean_fields(
            email,
            name=given.name,
            filter=given.filter,
            timezone=given.timezone,
            send_hour=given.send_hour,
            backfill=given.backfill,
            cadence=given.cadence,
        )
        return dataclasses.replace(fields, **clean_settings(given.settings))
    except SubscriberInputError as exc:
        fail("; ".join(_as_option(problem) for problem in exc.problems), EXIT_USAGE)


def _as_option(problem: str) -> str:
    """A field's problem as the command line names the field: "timezone: ..." -> "--tz: ..."."""
    field, colon, reason = problem.partition(": ")
    return f"{_FIELD_OPTIONS[field]}: {reason}" if colon and field in _FIELD_OPTIONS else problem


def find_subscriber(factory: sessionmaker[Session], email: str) -> Subscriber:
    """The subscriber with this address, or exit 1 saying there is none."""
    from bot.subscribers.subscriptions import SubscriberNotFound, find

    try:
        return find(factory, email)
    except SubscriberNotFound as exc:
        fail(str(exc))
