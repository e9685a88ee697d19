"""Store: an entry's content (``bot.domain.EntryContent``) as a row of ``entries``
holds it and back, field by field from the dataclass (``row_shapes``), so a field added
there and as a column of the same name needs no edit here.  Never runs a statement
itself."""

from __future__ import annotations

from typing import Any

from bot.domain import EntryContent
from bot.store.row_shapes import RowShape
from bot.store.schema import Entry

CONTENT = RowShape(EntryContent)
CONTENT_FIELDS = CONTENT.names
CONTENT_COLUMNS = tuple(getattr(Entry, name) for name in CONTENT_FIELDS)


def content_of(row: Any, summary: str | None = None) -> EntryContent:
    """The content of a row that has every column of ``CONTENT_COLUMNS``; *summary*
    instead of the row's (a digest's pinned variant)."""
    return CONTENT.of(row) if summary is None else CONTENT.of(row, summary=summary)


def content_columns(content: EntryContent) -> dict[str, Any]:
    """The columns of ``entries`` that hold *content*, by name, as they are written."""
    return CONTENT.columns(content)
