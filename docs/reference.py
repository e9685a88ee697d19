"""Writes the two reference pages from the code, so that they cannot drift from it:
``docs/reference/configuration.md`` from the settings model (``bot.config.Settings``:
every section and key, its type, default, bounds, environment variable and the comment
the code gives it) and ``docs/reference/cli.md`` from the Typer app (every command's
``--help``, as the CLI prints it).  ``make docs`` runs it; ``tests/test_docs.py`` fails
when a committed page differs from what it writes.

    python docs/reference.py [--check]
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import re
import sys
import tokenize
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    "configuration": ROOT / "docs" / "reference" / "configuration.md",
    "cli": ROOT / "docs" / "reference" / "cli.md",
}


def comments_of(model: type[BaseModel]) -> dict[str, str]:
    """Each field's comment in the class's source: the comment lines just above it and
    the comment at the end of its line."""
    source = inspect.getsource(model)
    trailing = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT and token.line[: token.start[1]].strip()
    }
    found: dict[str, str] = {}
    above: list[str] = []
    for row, line in enumerate(source.splitlines(), start=1):
        field = re.match(r"    ([a-z_][a-z0-9_]*)\s*:", line)
        if line.startswith("    #"):
            above.append(line.strip().lstrip("#").strip())
            continue
        if field and field.group(1) in model.model_fields:
            found[field.group(1)] = " ".join([*above, trailing.get(row, "")]).strip()
        above = []
    return found


def _type_of(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or repr(annotation)
    text = re.sub(r"typing\.|pathlib\.|pydantic\.types\.|<class '([^']+)'>", r"\1", text)
    text = re.sub(r"Annotated\[([^,\]]+(?:\[[^\]]*\])?),.*\]$", r"\1", text)
    return text.replace("NoneType", "None")


def _default_of(field: FieldInfo) -> str:
    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, SecretStr):
        return '""' if not value.get_secret_value() else "(set)"
    if isinstance(value, Path):
        shipped = value.is_absolute() and value.is_relative_to(ROOT)
        return f'"{value.relative_to(ROOT)}" (shipped)' if shipped else f'"{value}"'
    if isinstance(value, BaseModel):
        return "(see below)"
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return str(value)


def _bounds_of(field: FieldInfo) -> str:
    parts = []
    for item in field.metadata:
        for name, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{sign} {value}")
        pattern = getattr(item, "pattern", None)
        if pattern is not None:
            parts.append(f"matches `{pattern}`")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def configuration_page() -> str:
    from bot.config import Settings

    lines = [
        "# Configuration reference",
        "",
        "Generated from `bot/config/__init__.py` by `docs/reference.py` (`make docs`): every key of",
        "`config/digestbot.toml`, its type, default and bounds, and the environment variable",
        "that overrides it (`DIGESTBOT_<SECTION>__<KEY>`). What the settings do together, and",
        "which belong together, is in [Configuration](../configuration.md).",
        "",
    ]
    for section, field in Settings.model_fields.items():
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        comments = comments_of(model)
        lines += [f"## [{section}]", ""]
        doc = inspect.getdoc(model)
        if doc and doc != inspect.getdoc(BaseModel) and not doc.startswith("!!!"):
            lines += [" ".join(doc.split()), ""]
        lines += [
            "| key | type | default | bounds | environment | what it is |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for key, info in model.model_fields.items():
            env = f"DIGESTBOT_{section.upper()}__{key.upper()}"
            row = (
                f"`{key}`",
                f"`{_cell(_type_of(info.annotation))}`",
                f"`{_cell(_default_of(info))}`",
                _cell(_bounds_of(info)),
                f"`{env}`",
                _cell(info.description or comments.get(key, "")),
            )
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def cli_page() -> str:
    import typer.main

    from bot.cli import app
    from bot.cli.command_line import plain_help

    command = typer.main.get_command(app)
    plain_help(command)
    lines = [
        "# CLI reference",
        "",
        "Generated from the Typer app by `docs/reference.py` (`make docs`): each command's",
        "`--help`, as `digestbot` prints it. Exit codes and the conventions every command",
        "keeps are in [The command line](../cli.md).",
        "",
    ]
    for path, sub in _commands(command, ["digestbot"]):
        lines += [f"## {' '.join(path)}", "", "```text", _help_of(sub, path).rstrip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _commands(command: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    found = [(path, command)]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += _commands(sub, [*path, name])
    return found


def _help_of(command: Any, path: list[str]) -> str:
    import click

    with click.Context(command, info_name=" ".join(path), terminal_width=88, max_content_width=88) as ctx:
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            print(command.get_help(ctx))
        return buffer.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say which page differs (exit 1)")
    arguments = parser.parse_args()
    made = {"configuration": configuration_page(), "cli": cli_page()}
    stale = [name for name, text in made.items() if not PAGES[name].exists() or PAGES[name].read_text() != text]
    if arguments.check:
        for name in stale:
            print(f"{PAGES[name].relative_to(ROOT)} differs from the code: run make docs", file=sys.stderr)
        return 1 if stale else 0
    for name, text in made.items():
        PAGES[name].parent.mkdir(parents=True, exist_ok=True)
        PAGES[name].write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
