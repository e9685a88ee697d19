"""CLI command line: help screens in the usual Unix shape and usage errors as one
``error:`` line, over Typer's public parameter classes and Click's public methods and
exception attributes (Typer re-exports none of Click's exception classes but
``BadParameter``; its private modules are not used).  Never runs a command itself."""

from __future__ import annotations

import functools
import re
from typing import Protocol

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, err
from bot.cli.troubles import missing_extra, store_trouble


def plain_help(command: TyperCommand | TyperGroup) -> None:
    """Help screens in the usual Unix shape: ``EMAIL`` and ``[EMAIL]`` for arguments,
    ``--hour N`` for options, nothing after a flag.  Typer labels every parameter with
    its Python type (``--failed <bool>``, ``<list[Path]>``, ``{email}``)."""
    for param in command.params:
        if isinstance(param, TyperArgument):
            label = (param.metavar or param.name or "").upper() + ("..." if param.nargs != 1 else "")
            param.metavar = label
            usage = label if param.required else f"[{label}]"
            # Typer has no setting for these two; Click's and Typer's public methods,
            # replaced on this parameter object only.
            param.get_usage_pieces = functools.partial(_usage_pieces, usage)  # type: ignore[method-assign]
            param.display_type = functools.partial(_no_type_label)  # type: ignore[method-assign]
        elif isinstance(param, TyperOption) and not param.is_flag and param.metavar is None:
            named = [_OPTION_LABELS[o] for o in param.opts if o in _OPTION_LABELS]
            param.metavar = named[0] if named else _value_label(param.type_descriptor)
    if isinstance(command, TyperGroup):
        _plain_group(command)


def _plain_group(group: TyperGroup) -> None:
    for sub in group.commands.values():
        if isinstance(sub, (TyperCommand, TyperGroup)):
            plain_help(sub)


def _no_type_label(ctx: object) -> str:
    return ""


def _usage_pieces(usage: str, ctx: object) -> list[str]:
    return [usage]


# What an option's value is, by the option's name, wherever it appears.
_OPTION_LABELS = {
    "--config": "FILE",
    "--subscriber": "EMAIL",
    "--library": "EMAIL",
    "--date": "YYYY-MM-DD",
    "--since": "YYYY-MM-DD",
    "--tz": "ZONE",
    "--filter": "FILTER",
    "--tag": "TAG",
    "--name": "NAME",
    "--backfill": "7d|all|none",
    "--host": "ADDRESS",
    "--port": "PORT",
}


class _Described(Protocol):
    """What Typer says of a parameter's annotation (its own class is private)."""

    @property
    def choices(self) -> tuple[object, ...] | None: ...
    @property
    def is_path(self) -> bool: ...
    @property
    def annotation(self) -> object: ...


def _value_label(described: _Described) -> str:
    """The value's label from Typer's description of the parameter's annotation."""
    if described.choices:
        return "[" + "|".join(str(getattr(choice, "value", choice)) for choice in described.choices) + "]"
    if described.is_path:
        return "PATH"
    kind = described.annotation
    return "N" if kind is int else "NUMBER" if kind is float else "TEXT"


# Typer coerces values with pydantic; its words are not ours.
_VALUE_WORDING = (
    ("Input should be a valid integer, unable to parse string as an integer", "must be a whole number"),
    ("Input should be a valid number, unable to parse string as a number", "must be a number"),
    ("Input should be ", "must be "),
    ("Value error, ", ""),
)


def run_command_line(command: TyperGroup) -> int:
    """Run the CLI; a usage error is one ``error:`` line naming the option and where
    to find help, exit 2.  Returns the exit code."""
    try:
        code = command.main(prog_name="digestbot", standalone_mode=False)
    except typer.Abort:
        err.print("error: aborted", markup=False)
        return EXIT_INPUT_FAILED
    except Exception as exc:  # noqa: BLE001 - Click's errors, the store's troubles, a missing extra in one line
        said = _command_line_error(exc)
        if said is None:
            trouble = store_trouble(exc) or missing_extra(exc)
            if trouble is None:
                raise
            said = (f"error: {trouble}", EXIT_USAGE)
        err.print(said[0], markup=False)
        return said[1]
    return code if isinstance(code, int) else 0


def _command_line_error(exc: Exception) -> tuple[str, int] | None:
    """What to print for one of Click's exceptions, and the exit code; None for any
    other.  Known by Click's public attributes: ``exit_code``, ``format_message()`` and,
    for a usage error, ``ctx`` (a group run without a command gets its help)."""
    exit_code = getattr(exc, "exit_code", None)
    format_message = getattr(exc, "format_message", None)
    if not isinstance(exit_code, int) or not callable(format_message):
        return None
    message = str(format_message())
    if not hasattr(exc, "ctx"):
        return f"error: {message}", exit_code
    ctx = exc.ctx
    if ctx is not None and message == ctx.get_help():
        return message, EXIT_USAGE
    message = re.sub(r"^Invalid value for '?([^':]+)'?: ", r"\1: ", message)
    for theirs, ours in _VALUE_WORDING:
        message = message.replace(theirs, ours)
    where = ctx.command_path if ctx is not None else "digestbot"
    return f"error: {message.rstrip('.')} (see '{where} --help')", EXIT_USAGE
