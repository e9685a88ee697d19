"""CLI: tables that fit the terminal, as ``git``, ``kubectl`` and ``gh`` fit theirs.

A table names its key columns (an address, a date, a status: shown whole, never cut)
and the columns it may leave out when it is too wide: those with nothing in them first
(all zeros or blank), then the least important; the other columns fold their text onto
more lines, each keeping at least the width it ``wants`` before a column that may go
stays (a title is not folded over eleven lines to keep a key whole).  A table that
left columns out says which, and ``--json`` always has them all.  Never holds logic of its own beyond laying
out what a command gives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.table import Table

# What a column costs beyond its text: the separator and one space either side of it.
_GAP = 3
# A folding column keeps at least this many characters a line (or its longest word).
_FOLDED = 12


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    whole: bool = False  # a key column: its values are never cut or folded
    drop: int = 0  # 0: always shown; when the table is too wide the highest goes first
    justify: Literal["left", "right"] = "left"
    wants: int = 0  # a folding column's comfortable width, kept before a droppable column is
    words: bool = False  # folds between words only: a file name or a title's word is never cut
    share: int = 0  # of the room left, this column's share against the others' (0: its text's width)
    least: int = 0  # never narrower than this (a zone such as America/Los_Angeles on one line)


def fitted(
    columns: Sequence[Column | str],
    rows: Iterable[Sequence[str]],
    *,
    width: int,
    title: str | None = None,
) -> Table:
    """A table of *rows* laid out within *width* characters: columns left out, highest
    ``drop`` first, until its key columns fit whole and the others keep room to fold."""
    from rich import box
    from rich.table import Table

    specs = [c if isinstance(c, Column) else Column(c) for c in columns]
    cells = [[str(value) for value in row] for row in rows]
    needs = [_needed(spec, [row[n] for row in cells]) for n, spec in enumerate(specs)]
    shown = _shown(specs, needs, width, _empty(len(specs), cells))
    left_out = [specs[n].header for n in range(len(specs)) if n not in shown]
    # On a line of its own: folded into the list at a narrow width, it read "(--json has every" / "column)".
    caption = f"left out at this width: {', '.join(left_out)}\n(--json has every column)" if left_out else None
    table = Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        caption_justify="left",
        expand=any(specs[n].share for n in shown),  # rich shares the room by ratio only when it expands
    )
    for n in shown:
        spec = specs[n]
        table.add_column(
            spec.header,
            no_wrap=spec.whole,
            min_width=max(needs[n], spec.least),
            overflow="fold",
            justify=spec.justify,
            ratio=spec.share or None,
        )
    for row in cells:
        table.add_row(*(row[n] for n in shown))
    return table


def _empty(count: int, cells: list[list[str]]) -> set[int]:
    """The columns with nothing in them: every value blank or zero."""
    return {n for n in range(count) if all(row[n].strip() in ("", "0") for row in cells)}


def _shown(specs: list[Column], needs: list[int], width: int, empty: set[int]) -> list[int]:
    """The columns that fit in *width* (the folding ones at the width they want): all, or
    all but those left out: the empty first (a key column only when it may go), then the
    highest ``drop``."""
    shown = list(range(len(specs)))
    while sum(max(needs[n], specs[n].wants) for n in shown) + _GAP * (len(shown) - 1) > width:
        # A folding column with nothing in it may go too (an error column no row fills).
        droppable = [n for n in shown if specs[n].drop or (n in empty and not specs[n].whole)]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda n: (n in empty, specs[n].drop, n)))
    return shown


def _needed(spec: Column, values: list[str]) -> int:
    """The room a column needs: a key column its widest value whole; another the least
    it folds to (its longest word, at most ``_FOLDED``, or its whole text if shorter)."""
    widest = max([len(spec.header), *(len(v) for v in values)])
    if spec.whole:
        return widest
    longest_word = max([len(w) for v in [spec.header, *values] for w in v.split()] or [1])
    if spec.words:
        return longest_word
    if spec.least:
        return max(spec.least, min(widest, _FOLDED))
    return min(widest, max(min(longest_word, _FOLDED), min(len(spec.header), _FOLDED)))
