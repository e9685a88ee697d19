"""CLI: the options ``subscribers add`` and ``edit`` share: a reader's digest choices
(``--name``, ``--filter``, ``--tz``, ``--hour``, ``--backfill``, ``--cadence``) and a
``--FLAG/--no-FLAG`` for each of their yes/no settings (``bot.subscribers.settings``),
so that a new setting needs no edit here or in the commands.  Never holds business
logic: the subscriber service validates every value."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated

import typer

from bot.subscribers.settings import SETTINGS


@dataclass(frozen=True)
class DigestChoices:
    """The digest choices and yes/no settings an operator gave on the command line; None
    (or absent) leaves one as it is.  The subscriber service validates them."""

    name: str | None = None
    filter: str | None = None
    timezone: str | None = None
    send_hour: int | None = None
    backfill: str | None = None
    cadence: str | None = None
    settings: Mapping[str, bool] = field(default_factory=dict)


# Each option: (its parameter, its field of DigestChoices, its type and option).
CHOICES: tuple[tuple[str, str, object], ...] = (
    ("name", "name", Annotated[str | None, typer.Option("--name", help="Display name.")]),
    (
        "filter",
        "filter",
        Annotated[
            str | None,
            typer.Option(
                "--filter", help="Filter, e.g. 'gpu and (llm or moe) and not snn', '\"sparse attention\"', '*'."
            ),
        ],
    ),
    ("tz", "timezone", Annotated[str | None, typer.Option("--tz", help="IANA time zone, e.g. Europe/Berlin.")]),
    (
        "hour",
        "send_hour",
        Annotated[int | None, typer.Option("--hour", help="Local hour (0-23) to send the daily digest.")],
    ),
    (
        "backfill",
        "backfill",
        Annotated[
            str | None,
            typer.Option(
                "--backfill",
                help="What a new subscriber gets first: '7d' (entries of the last 7 days), 'all', 'none'.",
            ),
        ],
    ),
    (
        "cadence",
        "cadence",
        Annotated[
            str | None,
            typer.Option(
                "--cadence",
                help="How often: 'daily' (default), 'weekdays' (Monday to Friday), 'weekly:mon', 'feed' (no mail).",
            ),
        ],
    ),
)


# A command's parameters are whatever Typer reads off its signature, which this rewrites.
def with_choice_options(command: Callable[..., None]) -> Callable[..., None]:  # type: ignore[explicit-any]
    """*command* with the digest-choice options and a ``--FLAG/--no-FLAG`` per setting;
    it gets those given as ``choices`` (``DigestChoices``), and none of the options
    itself.  Typer reads the options from the wrapper's signature."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "choices"]
    keyword = inspect.Parameter.KEYWORD_ONLY
    options = [inspect.Parameter(name, keyword, default=None, annotation=kind) for name, _, kind in CHOICES]
    flags = [
        inspect.Parameter(
            s.name,
            keyword,
            default=None,
            annotation=Annotated[bool | None, typer.Option(f"--{s.flag}/--no-{s.flag}", help=s.help)],
        )
        for s in SETTINGS
    ]
    named = {name: field for name, field, _ in CHOICES}

    @functools.wraps(command)
    def wrapper(*args: object, **kwargs: object) -> None:
        given = {field: kwargs.pop(name) for name, field in named.items()}
        flags = {s.name: kwargs.pop(s.name) for s in SETTINGS}
        command(*args, **kwargs, choices=_choices(given, flags))

    parameters = [*kept, *options, *flags]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    del wrapper.__wrapped__  # Typer must see the wrapper's signature, not the command's
    return wrapper


def _choices(given: Mapping[str, object], flags: Mapping[str, object]) -> DigestChoices:
    """What Typer parsed, as ``DigestChoices`` (an option not given is None)."""

    def text(name: str) -> str | None:
        value = given[name]
        return value if isinstance(value, str) else None

    hour = given["send_hour"]
    return DigestChoices(
        name=text("name"),
        filter=text("filter"),
        timezone=text("timezone"),
        send_hour=hour if isinstance(hour, int) else None,
        backfill=text("backfill"),
        cadence=text("cadence"),
        settings={name: value for name, value in flags.items() if isinstance(value, bool)},
    )
