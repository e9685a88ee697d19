"""CLI command line: help screens in the usual Unix shape and usage errors as one
``error:`` line, over Typer's parameter classes.  Never runs a command itself."""

from __future__ import annotations

import functools
import re
from typing import Any

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

from bot.cli.shell import EXIT_INPUT_FAILED, EXIT_USAGE, err
from bot.cli.troubles import store_trouble


def plain_help(command: Any) -> None:
    """Help screens in the usual Unix shape: ``EMAIL`` and ``[EMAIL]`` for arguments,
    ``--hour N`` for options, nothing after a flag.  Typer labels every parameter with
    its Python type (``--failed <bool>``, ``<list[Path]>``, ``{email}``)."""
    for param in command.params:
        if isinstance(param, TyperArgument):
            label = (param.metavar or param.name or "").upper() + ("..." if param.nargs != 1 else "")
            param.metavar = label
            usage = label if param.required else f"[{label}]"
            # Typer has no setting for these two; replaced on this parameter object only.
            param._usage_display_name = functools.partial(str, usage)  # type: ignore[method-assign]
            param.display_type = functools.partial(_no_type_label)  # type: ignore[method-assign]
        elif isinstance(param, TyperOption) and not param.is_flag and param.metavar is None:
            named = [_OPTION_LABELS[o] for o in param.opts if o in _OPTION_LABELS]
            param.metavar = named[0] if named else _value_label(param.type_descriptor)
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            plain_help(sub)


def _no_type_label(ctx: object) -> str:
    return ""


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


def _value_label(described: Any) -> str:
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


def run_command_line(command: Any) -> int:
    """Run the CLI; a usage error is one ``error:`` line naming the option and where
    to find help, exit 2.  Returns the exit code."""
    from typer._click import exceptions as click_errors

    try:
        code = command.main(prog_name="digestbot", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        exc.show()
        return EXIT_USAGE
    except click_errors.UsageError as exc:
        message = re.sub(r"^Invalid value for '?([^':]+)'?: ", r"\1: ", exc.format_message())
        for theirs, ours in _VALUE_WORDING:
            message = message.replace(theirs, ours)
        where = exc.ctx.command_path if exc.ctx is not None else "digestbot"
        err.print(f"error: {message.rstrip('.')} (see '{where} --help')", markup=False)
        return EXIT_USAGE
    except click_errors.ClickException as exc:
        err.print(f"error: {exc.format_message()}", markup=False)
        return exc.exit_code
    except typer.Abort:
        err.print("error: aborted", markup=False)
        return EXIT_INPUT_FAILED
    except Exception as exc:  # noqa: BLE001 - the store's troubles, said in one line; anything else re-raised
        said = store_trouble(exc)
        if said is None:
            raise
        err.print(f"error: {said}", markup=False)
        return EXIT_USAGE
    return code if isinstance(code, int) else 0
