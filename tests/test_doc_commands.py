"""Every digestbot command line the docs and the examples show names a command that
exists and options it takes (a newcomer copied `send`, which is `send-now`)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer.main
from typer.core import TyperGroup

from bot.cli import app
from tests.conftest import ROOT

# `digestbot …` in an inline code span, or a command line in a code block ($ optional).
_INLINE = re.compile(r"`(digestbot(?: [^`]*)?)`")
_LINE = re.compile(r"^\s*(?:\$ )?(digestbot(?: .*)?)$")
_BESIDE = re.compile(r"\s*(?:,|and|or|/)\s*`([a-z][a-z-]*)`")
_CELL = re.compile(r"`([a-z][a-z-]*(?: [^`]*)?)`")
_SOURCES = ("docs/**/*.md", "README.md", "CONTRIBUTING.md", "examples/**/*.py", "examples/**/*.md", "deploy/**/*")


def shown_commands(root: Path) -> list[tuple[str, str]]:
    """(where, command line) for each digestbot command line shown: in an inline code
    span, on a line of a code block, and in the command tables of docs/cli.md (where
    "`subscribers pause EMAIL` / `resume EMAIL`" shows two)."""
    found = []
    for pattern in _SOURCES:
        for path in sorted(root.glob(pattern)):
            if not path.is_file() or "reference" in path.parts:  # the reference is --help itself
                continue
            in_block = False
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
                where = f"{path.relative_to(root)}:{number}"
                if line.lstrip().startswith("```"):
                    in_block = not in_block
                spans = _INLINE.findall(line)
                found += [(where, text) for text in spans]
                found += [(where, f"digestbot {name}") for name in _listed_beside(line)]
                block = _LINE.match(line)
                if block and (in_block or line.lstrip().startswith("$ ")):
                    found.append((where, block.group(1)))
                if path.name == "cli.md" and line.startswith("| `"):
                    found += [(where, text) for text in _table_commands(line.split("|")[1])]
    return found


def _listed_beside(line: str) -> list[str]:
    """Names listed right after a `digestbot …` span ("`digestbot run` and `send`"): commands too."""
    names = []
    for span in re.finditer(r"`digestbot [^`]+`", line):
        at = span.end()
        while (more := _BESIDE.match(line, at)) is not None:
            names.append(more.group(1))
            at = more.end()
    return names


def _table_commands(cell: str) -> list[str]:
    """The command lines of one cell of a command table; one after the first may leave
    out the group the first names ("`subscribers pause EMAIL` / `resume EMAIL`")."""
    spans = _CELL.findall(cell)
    if not spans:
        return []
    group = spans[0].split()
    return [f"digestbot {spans[0]}", *(_in_group(span, group) for span in spans[1:])]


def _in_group(span: str, group: list[str]) -> str:
    """*span* under the longest command path of *group* that has its first word."""
    command = typer.main.get_command(app)
    path: list[str] = []
    groups = [(path, command)]
    for word in group:
        sub = getattr(groups[-1][1], "commands", {}).get(word)
        if sub is None:
            break
        path = [*path, word]
        groups.append((path, sub))
    for prefix, found in reversed(groups):
        if span.split()[0] in getattr(found, "commands", {}):
            return " ".join(["digestbot", *prefix, span])
    return f"digestbot {span}"


def problem(command: TyperGroup, line: str) -> str | None:
    """What is wrong with *line* as a digestbot command line; None when nothing is."""
    try:
        words = shlex.split(re.sub(r"\[[^\]]*\]", "", line.split(" #", 1)[0]))[1:]  # a synopsis' [optional] parts
    except ValueError:
        return None  # prose with an apostrophe, not a command line
    if words and words[0].endswith(":"):
        return None  # words digestbot writes ("digestbot feedback: more like this"), not a command
    current = command
    global_options = {opt for param in command.params for opt in param.opts}
    while words and words[0].startswith("-") and words[0].split("=")[0] in global_options:
        words = words[2:] if words[0] in ("--config", "-c", "--log-format") else words[1:]
    while words and isinstance(current, TyperGroup) and not words[0].startswith("-"):
        sub = current.commands.get(words[0])
        if sub is None:
            if words[0] in ("…", "...", "COMMAND", "<command>"):
                return None
            return f"no command {words[0]!r} in '{current.name or 'digestbot'}'"
        current, words = sub, words[1:]  # type: ignore[assignment]
    options = {opt for param in current.params for opt in [*param.opts, *param.secondary_opts]} | {"--help"}
    for word in words:
        if word.startswith("--") and word.split("=")[0] not in options and word not in ("--…", "--..."):
            return f"'{current.name}' takes no option {word.split('=')[0]!r}"
    return None


def test_every_command_line_in_the_docs_and_examples_is_real() -> None:
    command = typer.main.get_command(app)
    assert isinstance(command, TyperGroup)
    shown = shown_commands(ROOT)
    assert len(shown) > 100  # the docs are read, not skipped (the command tables of docs/cli.md too)
    wrong = [f"{where}: {line}: {said}" for where, line in shown if (said := problem(command, line))]
    assert wrong == []


def test_a_command_or_option_that_does_not_exist_is_found() -> None:
    command = typer.main.get_command(app)
    assert isinstance(command, TyperGroup)
    assert problem(command, "digestbot send reader@example.org") == "no command 'send' in 'digestbot'"
    assert _listed_beside("(`digestbot run --once` and `send` print it)") == ["send"]
    assert problem(command, "digestbot subscribers add a@x --hours 8") == "'add' takes no option '--hours'"
    assert problem(command, "digestbot db copy --to 'postgresql+psycopg://u@h/d'") is None
    assert problem(command, "digestbot -v run --once") is None
    assert problem(command, "digestbot --config site.toml subscribers edit a@x --no-updates") is None


def test_every_docs_page_named_in_the_code_docs_and_examples_exists() -> None:
    """A pointer to a page that is not there ("docs/ranking.md for the protocol", which is
    docs/rankers.md) is found; whether it is the right page is for a reader."""
    named = []
    for pattern in ("bot/**/*.py", "examples/**/*", "docs/**/*.md", "README.md", "CONTRIBUTING.md", "config/*"):
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file() and path.suffix in (".py", ".md", ".toml", ".csv", ".yml", ".txt", ""):
                text = path.read_text(encoding="utf-8", errors="replace")
                named += [(path.relative_to(ROOT), page) for page in re.findall(r"docs/[\w./-]+\.md", text)]
    assert len(named) > 20
    assert [f"{where}: {page}" for where, page in named if not (ROOT / page).is_file()] == []
