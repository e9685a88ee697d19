"""Sources: RSS 2.0 and Atom 1.0 feeds, read by feedparser.

Pure: never touches the store, the network or the clock, and raises only
``FeedFormatError`` for a document it cannot read.
"""

from __future__ import annotations

import re
import time
from datetime import date
from typing import Any

from bot.domain import ParsedSource
from bot.domain.text import html_text, one_line, tag_label
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

# feedparser's time grows with the elements (twice when the strict parse fails and
# its loose parser retries): beyond this a document would hold the watcher for
# minutes.  A 10,000-entry arXiv feed has well under half as many.
MAX_XML_ELEMENTS = 400_000
# A numeric character reference, as feedparser's loose parser finds one: the ";" is
# optional there, and any number of digits is read.
_CHARACTER_REFERENCE = re.compile(r"&#(?:[xX]0*([0-9A-Fa-f]+)|0*([0-9]+));?")
_CHARACTER_REFERENCE_BYTES = re.compile(_CHARACTER_REFERENCE.pattern.encode())
_REPLACEMENT = "&#xFFFD;"


def _is_xml_character(code: int) -> bool:
    return code in (0x9, 0xA, 0xD) or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or 0x10000 <= code <= 0x10FFFF


def _reference(match: re.Match[Any]) -> Any:
    """A reference to no XML character (a surrogate, NUL, past U+10FFFF, 99999999999999999999)
    as one to U+FFFD, as HTML reads them; feedparser raises on them."""
    hexadecimal, decimal = match.groups()
    digits = hexadecimal or decimal
    valid = len(digits) <= 7 and _is_xml_character(int(digits, 16 if hexadecimal is not None else 10))
    if valid:
        return match.group()
    return _REPLACEMENT.encode() if isinstance(digits, bytes) else _REPLACEMENT


def xml_characters_only(data: bytes) -> bytes:
    """*data* with every numeric character reference naming a character XML has; a
    UTF-16 or UTF-32 document is read in its encoding, anything else as bytes (the
    references are ASCII in every encoding feedparser reads)."""
    wide = wide_encoding(data)
    if wide is None:
        return _CHARACTER_REFERENCE_BYTES.sub(_reference, data) if b"&#" in data else data
    codec, bom = wide
    try:
        text = data[bom:].decode(codec)
    except UnicodeDecodeError:
        return data  # feedparser says what is wrong with it
    return data[:bom] + _CHARACTER_REFERENCE.sub(_reference, text).encode(codec)


def parse_xml_feed(data: bytes, name: str) -> ParsedSource:
    if data.count(b"<") > MAX_XML_ELEMENTS:
        raise FeedFormatError(name, 0, f"more than {MAX_XML_ELEMENTS:,} XML elements; too big to be read as a feed")
    import feedparser  # here: a process that reads no feed (a worker) never loads it

    parsed = feedparser.parse(xml_characters_only(data), sanitize_html=False, resolve_relative_uris=False)
    if not parsed.version:
        raise _not_a_feed(parsed, name)
    fmt = "atom" if parsed.version.startswith("atom") else "rss"
    read = (
        _item(item) or f"{name}: entry {n} {quoted_id(item.get('id'))} has no title and no text; left out"
        for n, item in enumerate(parsed.entries, start=1)
    )
    return feed_source(fmt, parsed.feed.get("title"), read)


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
