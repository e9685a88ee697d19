"""CLI: the options ``subscribers add`` and ``edit`` share: a reader's digest choices
(``--name``, ``--filter``, ``--tz``, ``--hour``, ``--backfill``, ``--cadence``) and a
``--FLAG/--no-FLAG`` for each of their yes/no settings (``bot.subscribers.settings``),
so that a new setting needs no edit here or in the commands.  Never holds business
logic: the subscriber service validates every value."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from bot.subscribers.settings import SETTINGS

# Each option: (its parameter, the subscriber service's name for it, its type and option).
CHOICES: tuple[tuple[str, str, Any], ...] = (
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


def with_choice_options(command: Callable[..., None]) -> Callable[..., None]:
    """*command* with the digest-choice options and a ``--FLAG/--no-FLAG`` per setting;
    it gets those given as ``choices`` (the service's name -> value), and none of the
    options itself.  Typer reads the options from the wrapper's signature."""
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
    named = {name: field for name, field, _ in CHOICES} | {s.name: s.name for s in SETTINGS}

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        given = {field: kwargs.pop(name) for name, field in named.items()}
        command(*args, **kwargs, choices={field: value for field, value in given.items() if value is not None})

    parameters = [*kept, *options, *flags]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    del wrapper.__wrapped__  # Typer must see the wrapper's signature, not the command's
    return wrapper
