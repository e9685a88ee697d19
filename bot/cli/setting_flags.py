"""CLI: a ``--FLAG/--no-FLAG`` option on a command for each of the subscriber's yes/no
settings (``bot.subscribers.settings``), so that a new setting needs no edit here or in
the commands.  Never holds business logic."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from bot.subscribers.settings import SETTINGS


def with_setting_flags(command: Callable[..., None]) -> Callable[..., None]:
    """*command* with a ``--FLAG/--no-FLAG`` option per setting; it gets those given as
    ``settings`` (setting name -> bool), and none of the options itself.  Typer reads
    the options from the wrapper's signature."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "settings"]
    flags = [
        inspect.Parameter(
            s.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[bool | None, typer.Option(f"--{s.flag}/--no-{s.flag}", help=s.help)],
        )
        for s in SETTINGS
    ]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        given = {s.name: kwargs.pop(s.name) for s in SETTINGS}
        command(*args, **kwargs, settings={name: value for name, value in given.items() if value is not None})

    parameters = [*kept, *flags]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    del wrapper.__wrapped__  # Typer must see the wrapper's signature, not the command's
    return wrapper
