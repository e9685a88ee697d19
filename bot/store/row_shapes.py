"""Store: how a row becomes the frozen dataclass the store hands out, and back: the one
mechanism every table's reads use.  Each field is read from the row's attribute of the
same name (or the column ``columns`` names for it) and converted by the field's type:
an enum from its stored value, a tuple from a JSON list, sorted pairs from a JSON
object, a bool from 0 or 1; anything else as the column holds it.  Fields the store
works out itself (a zone read as untrusted, a joined address) are ``computed``: the
caller gives them.  The plan is made once per dataclass, not per row.  Never runs a
statement itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from enum import Enum
from typing import Any, Generic, TypeVar, cast, get_type_hints

T = TypeVar("T")
Convert = Callable[[Any], Any] | None


def _from_column(hint: Any) -> Convert:
    """How a column's value becomes the field's."""
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint
    if hint is bool:
        return bool
    if getattr(hint, "__origin__", None) is tuple:
        inner = hint.__args__[0]
        if getattr(inner, "__origin__", None) is tuple:
            return lambda value: tuple(sorted((value or {}).items()))
        return lambda value: tuple(value or ())
    return None


def _to_column(hint: Any) -> Convert:
    """The inverse of ``_from_column``: pairs to a JSON object, an enum to its value; a
    tuple is written as the JSON list it reads back as."""
    if isinstance(hint, type) and issubclass(hint, Enum):
        return lambda value: value.value
    if getattr(hint, "__origin__", None) is tuple and getattr(hint.__args__[0], "__origin__", None) is tuple:
        return dict
    return None


class RowShape(Generic[T]):
    """Rows of one kind as dataclass *cls*: ``of(row, **computed)``; its columns for a
    write: ``columns(value)``."""

    def __init__(self, cls: type[T], *, columns: Mapping[str, str] | None = None, computed: Iterable[str] = ()) -> None:
        hints = get_type_hints(cls)
        named = columns or {}
        left_out = set(computed)
        every = [f.name for f in fields(cast(Any, cls))]
        unknown = (left_out | set(named)) - set(every)
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {sorted(unknown)}")
        self.cls = cls
        self.plan: tuple[tuple[str, str, Convert], ...] = tuple(
            (name, named.get(name, name), _from_column(hints[name])) for name in every if name not in left_out
        )
        self.writes: tuple[tuple[str, str, Convert], ...] = tuple(
            (name, column, _to_column(hints[name])) for name, column, _ in self.plan
        )

    @property
    def names(self) -> tuple[str, ...]:
        """The columns every row read through this shape must have."""
        return tuple(column for _, column, _ in self.plan)

    def of(self, row: object, **given: object) -> T:
        """The dataclass of *row*; *given*: the computed fields (those left out keep their
        defaults), or a field's value instead of the row's."""
        values = {
            name: convert(getattr(row, column)) if convert is not None else getattr(row, column)
            for name, column, convert in self.plan
        }
        values.update(given)
        return self.cls(**values)

    def columns(self, value: T) -> dict[str, Any]:
        """The columns that hold *value*'s stored fields, by column name, as written."""
        return {
            column: convert(getattr(value, name)) if convert is not None else getattr(value, name)
            for name, column, convert in self.writes
        }
