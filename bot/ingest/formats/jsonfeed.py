"""Sources: JSON Feed 1.x, mapped by hand from the parsed JSON (1.0's ``author``
and 1.1's ``authors``; an arXiv feed's ``_arxiv.announce_type``).  An item that is not
an object, or has no title and no text, is left out with a line that says which.

Pure: never touches the store, the network or the clock; raises only
``FeedFormatError``, naming the line, for a document that is not a JSON Feed.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from typing import Any

from bot.domain import ParsedSource
from bot.domain.text import one_line, tag_label
from bot.ingest.formats.detect import wide_encoding
from bot.ingest.formats.feed_items import (
    FeedFormatError,
    FeedItem,
    announce,
    authors,
    feed_source,
    quoted_id,
    title_from,
)

_JSONFEED_VERSION = "https://jsonfeed.org/version/1"


def parse_json_feed(data: bytes, name: str) -> ParsedSource:
    doc = _load(data, name)
    if not isinstance(doc, dict) or not str(doc.get("version", "")).startswith(_JSONFEED_VERSION):
        raise FeedFormatError(name, 1, f'not a JSON Feed: expected "version": "{_JSONFEED_VERSION}.1"')
    items = doc.get("items")
    if not isinstance(items, list):
        raise FeedFormatError(name, 0, 'JSON Feed has no "items" list')
    return feed_source(
        "jsonfeed", doc.get("title"), (_read(item, f"{name}: items[{n}]") for n, item in enumerate(items))
    )


def _read(item: Any, where: str) -> FeedItem | str:
    if not isinstance(item, dict):
        return f"{where} is not an object; left out"
    return _item(item) or f"{where} {quoted_id(item.get('id'))} has no title and no text; left out"


def _load(data: bytes, name: str) -> Any:
    wide = wide_encoding(data)
    try:
        return json.loads(data[wide[1] :].decode(wide[0]) if wide else data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise FeedFormatError(name, 0, f"JSON Feed is not UTF-8: {exc.reason} at offset {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise FeedFormatError(name, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise FeedFormatError(name, 0, "JSON nested too deeply to be a feed") from None
    except ValueError:  # a number of thousands of digits, which Python refuses to convert
        raise FeedFormatError(name, 0, "a number too long to be read (more than 4,300 digits)") from None


def _item(item: dict[str, Any]) -> FeedItem | None:
    """The fields of one JSON Feed item; None when it has no title and no text."""
    summary, summary_type = _summary(item)
    title = one_line(str(item.get("title") or "")) or title_from(summary)
    if not title:
        return None
    arxiv = item.get("_arxiv")
    return FeedItem(
        title=title,
        ident=str(item.get("id", "")),
        link=str(item.get("url") or item.get("external_url") or ""),
        summary=summary,
        summary_type=summary_type,
        authors=authors(_author_names(item)),
        published=_date(item.get("date_published") or item.get("date_modified")),
        tags=tuple(tag_label(str(t)) for t in item.get("tags") or [] if isinstance(t, (str, int))),
        announce=announce(arxiv.get("announce_type") if isinstance(arxiv, dict) else None),
        doi_hint=str(item.get("external_url") or "") + " " + str(item.get("id", "")),
    )


def _summary(item: dict[str, Any]) -> tuple[str, str]:
    """(text, MIME type): the HTML content if there is any, else the plain text or summary."""
    if item.get("content_html"):
        return str(item["content_html"]), "text/html"
    return str(item.get("content_text") or item.get("summary") or ""), "text/plain"


def _author_names(item: dict[str, Any]) -> list[str]:
    # JSON Feed 1.1 has an "authors" list; 1.0 had one "author" object.
    people = item.get("authors") or ([item["author"]] if isinstance(item.get("author"), dict) else [])
    return [str(p.get("name", "")) for p in people if isinstance(p, dict)]


def _date(value: Any) -> date | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).date()
    except ValueError:
        return None
