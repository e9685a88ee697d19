"""Sources: RSS 2.0 and Atom 1.0 feeds, read by feedparser.

Pure: never touches the store, the network or the clock, and raises only
``FeedFormatError`` for a document it cannot read.
"""

from __future__ import annotations

import time
from datetime import date
from typing import Any

import feedparser

from bot.domain import ParsedEntry, ParsedSource
from bot.ingest.formats.feed_items import (
    FeedFormatError,
    FeedItem,
    announce,
    authors,
    feed_entry,
    quoted_id,
    title_from,
)
from bot.text import html_text, one_line, tag_label

# feedparser's time grows with the elements (twice when the strict parse fails and
# its loose parser retries): beyond this a document would hold the watcher for
# minutes.  A 10,000-entry arXiv feed has well under half as many.
MAX_XML_ELEMENTS = 400_000


def parse_xml_feed(data: bytes, name: str) -> ParsedSource:
    if data.count(b"<") > MAX_XML_ELEMENTS:
        raise FeedFormatError(name, 0, f"more than {MAX_XML_ELEMENTS:,} XML elements; too big to be read as a feed")
    parsed = feedparser.parse(data, sanitize_html=False, resolve_relative_uris=False)
    if not parsed.version:
        raise _not_a_feed(parsed, name)
    entries: list[ParsedEntry] = []
    skipped: list[str] = []
    for index, item in enumerate(parsed.entries, start=1):
        read = _item(item)
        if read is None:
            skipped.append(f"{name}: entry {index} {quoted_id(item.get('id'))} has no title and no text; left out")
        else:
            entries.append(feed_entry(read))
    fmt = "atom" if parsed.version.startswith("atom") else "rss"
    return ParsedSource(
        format=fmt, entries=tuple(entries), title=one_line(parsed.feed.get("title")), skipped=tuple(skipped)
    )


def _not_a_feed(parsed: Any, name: str) -> FeedFormatError:
    exc = parsed.get("bozo_exception")
    line = exc.getLineNumber() if exc is not None and hasattr(exc, "getLineNumber") else 0
    reason = one_line(str(exc)) if exc is not None else "no <rss> or <feed> root element"
    return FeedFormatError(name, line or 0, f"not an RSS or Atom feed: {reason}")


def _item(item: Any) -> FeedItem | None:
    """The fields of one feedparser entry; None when it has no title and no text."""
    content = item.get("content") or []
    detail = content[0] if content else item.get("summary_detail") or {}
    summary = detail.get("value", item.get("summary", "")) or ""
    title = _title_text(item) or title_from(summary)
    if not title:
        return None
    names = [a.get("name", "") for a in item.get("authors", []) if isinstance(a, dict)]
    return FeedItem(
        title=title,
        ident=item.get("id", ""),
        link=item.get("link", ""),
        summary=summary,
        summary_type=detail.get("type", "text/html") or "text/html",
        authors=authors(names),
        published=_struct_date(item.get("published_parsed") or item.get("updated_parsed")),
        tags=tuple(tag_label(t.get("term") or t.get("label")) for t in item.get("tags", [])),
        announce=announce(item.get("arxiv_announce_type")),
        doi_hint=" ".join(str(item.get(k, "")) for k in ("prism_doi", "arxiv_doi", "dc_identifier")),
    )


def _title_text(item: Any) -> str:
    """The item's title as text: of an HTML-typed one (Atom ``type="html"``, "Scheduling
    <i>MoE</i> Experts") the words, not the tags."""
    title = item.get("title") or ""
    if (item.get("title_detail") or {}).get("type") in ("text/html", "application/xhtml+xml"):
        title = html_text(title)
    return one_line(title)


def _struct_date(value: time.struct_time | None) -> date | None:
    return date(value.tm_year, value.tm_mon, value.tm_mday) if value else None
