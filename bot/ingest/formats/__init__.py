"""Sources stage: bytes in, ``ParsedSource`` out; one module per format behind
one detector (``detect``): ``dumps`` (text dumps), ``xmlfeed`` (RSS, Atom),
``jsonfeed`` (JSON Feed), with what feed items share in ``feed_items``.

Parsers here are pure: they never touch the store, the network (except
``fetch``) or the clock, and they raise only ``SourceFormatError`` subclasses
for bad input, with a one-line message naming the file and line.
"""

from __future__ import annotations

from bot.domain import ParsedSource
from bot.domain.text import one_line
from bot.ingest.formats.detect import looks_like_feed, looks_like_json
from bot.ingest.formats.dumps import DumpFormatError, parse_dump
from bot.ingest.formats.feed_items import FeedFormatError
from bot.ingest.formats.format_errors import SourceFormatError
from bot.ingest.formats.jsonfeed import parse_json_feed
from bot.ingest.formats.storable import storable_source
from bot.ingest.formats.xmlfeed import parse_xml_feed

__all__ = [
    "DumpFormatError",
    "FeedFormatError",
    "SourceFormatError",
    "looks_like_feed",
    "parse_any",
    "parse_dump",
    "parse_feed",
]


def parse_feed(data: bytes, name: str) -> ParsedSource:
    """Parse an RSS 2.0, Atom 1.0 or JSON Feed 1.x document."""
    if looks_like_json(data):
        return parse_json_feed(data, name)
    return parse_xml_feed(data, name)


def parse_any(data: bytes, name: str) -> ParsedSource:
    """Parse *data* as a feed when it looks like XML or JSON, else as a text dump; every
    entry storable and bounded (``storable``).  Whatever goes wrong in reading it is
    this document's ``SourceFormatError``: a library's exception on bytes it did not
    expect is said in one line, its cause kept for the log."""
    feed = looks_like_feed(data)
    try:
        parsed = parse_feed(data, name) if feed else parse_dump(data, name)
        return storable_source(parsed)
    except SourceFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - one source's failure, never the process's
        what = "feed" if feed else "dump"
        reason = f"{type(exc).__name__}: {one_line(str(exc))[:120]}"
        raise SourceFormatError(name, 0, f"could not be read as a {what} ({reason})") from exc
