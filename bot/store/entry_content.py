"""Store: an entry's content (``bot.domain.EntryContent``) as a row of ``entries``
holds it and back, field by field from the dataclass, so a field added there and as a
column of the same name needs no edit here.  Never runs a statement itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, get_type_hints

from bot.domain import EntryContent, EntryKind
from bot.store.schema import Entry


def _converter(hint: Any) -> Callable[[Any], Any] | None:
    """How a column's value becomes the field's: JSON lists to tuples, a JSON object to
    its sorted pairs, the kind to its enum; anything else as the column holds it."""
    if hint is EntryKind:
        return EntryKind
    if getattr(hint, "__origin__", None) is tuple:
        inner = hint.__args__[0]
        if getattr(inner, "__origin__", None) is tuple:
            return lambda value: tuple(sorted((value or {}).items()))
        return lambda value: tuple(value or ())
    return None


def _to_column(hint: Any) -> Callable[[Any], Any] | None:
    """The inverse of ``_converter``: pairs to a JSON object, the kind to its text; a
    tuple is written as the JSON list it reads back as."""
    if hint is EntryKind:
        return str
    if getattr(hint, "__origin__", None) is tuple and getattr(hint.__args__[0], "__origin__", None) is tuple:
        return dict
    return None


_HINTS = get_type_hints(EntryContent)
CONTENT_FIELDS = tuple(f.name for f in fields(EntryContent))
CONTENT_COLUMNS = tuple(getattr(Entry, name) for name in CONTENT_FIELDS)
_CONVERTERS = tuple((name, _converter(_HINTS[name])) for name in CONTENT_FIELDS)
_TO_COLUMNS = tuple((name, _to_column(_HINTS[name])) for name in CONTENT_FIELDS)


def content_of(row: Any, summary: str | None = None) -> EntryContent:
    """The content of a row that has every column of ``CONTENT_COLUMNS``; *summary*
    instead of the row's (a digest's pinned variant)."""
    values = {
        name: convert(getattr(row, name)) if convert is not None else getattr(row, name)
        for name, convert in _CONVERTERS
    }
    if summary is not None:
        values["summary"] = summary
    return EntryContent(**values)


def content_columns(content: EntryContent) -> dict[str, Any]:
    """The columns of ``entries`` that hold *content*, by name, as they are written."""
    return {
        name: convert(getattr(content, name)) if convert is not None else getattr(content, name)
        for name, convert in _TO_COLUMNS
    }
