"""CLI output: the two consoles (data on stdout, errors and progress on stderr), the
exit codes, one-line failures, --json lines, tables and progress.  Prints data
literally: no Rich markup, no emoji codes, no highlighting.  Decides nothing."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console

from bot.domain import IngestResult, SourceStatus
from bot.domain.text import plural

if TYPE_CHECKING:  # imported where used: every command pays for what it imports here
    from rich.table import Table

# Data is printed as it is: no Rich markup ("[bold]" in a title), no emoji codes
# (":x:" in "root:x:0"), no highlighting.
out = Console(highlight=False, soft_wrap=False, markup=False, emoji=False)


# soft_wrap: an error stays one line, whatever the terminal width.
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)


EXIT_INPUT_FAILED, EXIT_USAGE = 1, 2  # and 0 for success


def fail(message: str, code: int = EXIT_INPUT_FAILED) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(code)


# One object of --json output: printed with ``print_json_lines``, values made JSON by ``jsonable``.
JsonObject = dict[str, object]


def jsonable(value: object) -> object:
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


def print_json_lines(rows: Sequence[JsonObject]) -> None:
    for row in rows:
        sys.stdout.write(json.dumps(jsonable(row), ensure_ascii=False, sort_keys=False) + "\n")


def display_path(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


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


def new_table(*columns: str, title: str | None = None, show_header: bool = True, boxed: bool = True) -> Table:
    """A Rich table (imported on first use: most commands print none); unboxed, a list of
    names and values."""
    from rich.table import Table

    table = Table(*columns, title=title, show_header=show_header)
    if not boxed:
        table.box = None
    return table
