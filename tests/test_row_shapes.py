"""The one way the store turns rows into its dataclasses (bot.store.row_shapes): fields
read by name and converted by type, columns named where they differ, computed fields
given by the caller; and every dataclass the store hands out from a table uses it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.domain import EntryContent, EntryKind
from bot.store.entry_content import content_columns, content_of
from bot.store.row_shapes import RowShape
from tests.conftest import ROOT


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True, slots=True)
class Thing:
    id: int
    colour: Colour
    names: tuple[str, ...]
    extra: tuple[tuple[str, str], ...]
    on: bool
    count: int
    shown: str = "none"


SHAPE = RowShape(Thing, columns={"count": "count_col"}, computed=("shown",))


def test_a_row_becomes_its_dataclass_by_name_and_type() -> None:
    row = SimpleNamespace(id=7, colour="blue", names=["a", "b"], extra={"z": "1", "a": "2"}, on=1, count_col=3)
    assert SHAPE.of(row) == Thing(7, Colour.BLUE, ("a", "b"), (("a", "2"), ("z", "1")), True, 3)
    assert SHAPE.of(row, shown="computed").shown == "computed"
    empty = SimpleNamespace(id=1, colour="red", names=None, extra=None, on=0, count_col=0)
    assert SHAPE.of(empty) == Thing(1, Colour.RED, (), (), False, 0)
    assert SHAPE.names == ("id", "colour", "names", "extra", "on", "count_col")


def test_its_columns_are_what_the_row_held() -> None:
    thing = Thing(7, Colour.BLUE, ("a",), (("k", "v"),), True, 3)
    assert SHAPE.columns(thing) == {
        "id": 7,
        "colour": "blue",
        "names": ("a",),
        "extra": {"k": "v"},
        "on": True,
        "count_col": 3,
    }


def test_a_shape_naming_no_such_field_is_refused_at_once() -> None:
    with pytest.raises(TypeError, match="no field"):
        RowShape(Thing, computed=("colour", "nowhere"))
    with pytest.raises(TypeError, match="no field"):
        RowShape(Thing, columns={"nowhere": "x"})


@given(
    title=st.text(max_size=30),
    authors=st.lists(st.text(max_size=10), max_size=4).map(tuple),
    extra=st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=3),
)
def test_an_entrys_content_reads_back_as_it_was_written(title: str, authors: tuple[str, ...], extra: dict) -> None:
    content = EntryContent(
        kind=EntryKind.PAPER,
        title=title,
        authors=authors,
        published=None,
        extra=tuple(sorted(extra.items())),
        summary="s",
    )
    columns = content_columns(content)
    stored = SimpleNamespace(**{k: (list(v) if isinstance(v, tuple) else v) for k, v in columns.items()})
    assert content_of(stored) == content
    assert content_of(stored, summary="pinned").summary == "pinned"


def test_no_store_module_maps_a_table_row_by_hand() -> None:
    """A dataclass the store hands out is made through a RowShape: constructing one of the
    store's or the domain's dataclasses from a row's attributes one by one is found."""
    by_hand = []
    for path in sorted((ROOT / "bot" / "store").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or not node.func.id[0].isupper():
                continue
            read = [a for a in [*node.args, *(k.value for k in node.keywords)] if _row_attribute(a)]
            if len(read) >= 3:  # three or more fields copied from a row
                by_hand.append(f"{path.name}:{node.lineno}: {node.func.id}(...)")
    assert by_hand == []


def test_no_store_module_maps_a_row_by_position() -> None:
    """A row is never spread into a constructor or a helper by position (``Kind(*row)``):
    a column added to the query before another would shift every field after it."""
    spread = [
        f"{path.name}:{node.lineno}"
        for path in sorted((ROOT / "bot" / "store").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and any(
            isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) and a.value.id in {"row", "found", "r"}
            for a in node.args
        )
    ]
    assert spread == []


def _row_attribute(node: ast.expr) -> bool:
    if isinstance(node, ast.Call) and len(node.args) == 1:  # Kind(row.kind)
        node = node.args[0]
    return (
        isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in {"row", "r", "d", "s"}
    )


def test_the_store_reads_back_datetimes_as_it_wrote_them() -> None:
    at = datetime(2026, 6, 14, 12, tzinfo=UTC)
    assert SHAPE.of(SimpleNamespace(id=1, colour="red", names=[], extra={}, on=False, count_col=at)).count == at
