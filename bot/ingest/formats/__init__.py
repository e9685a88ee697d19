"""Sources stage: bytes in, ``ParsedSource`` out.

Parsers here are pure: they never touch the store, the network (except
``fetch``) or the clock, and they raise only ``SourceFormatError`` subclasses
for bad input, with a one-line message naming the file and line.
"""

from __future__ import annotations

from bot.domain import ParsedSource
from bot.ingest.formats.dumps import DumpFormatError, parse_dump
from bot.ingest.formats.errors import SourceFormatError
from bot.ingest.formats.feeds import FeedFormatError, looks_like_feed, parse_feed

__all__ = [
    "DumpFormatError",
    "FeedFormatError",
    "SourceFormatError",
    "looks_like_feed",
    "parse_any",
    "parse_dump",
    "parse_feed",
]


def parse_any(data: bytes, name: str) -> ParsedSource:
    """Parse *data* as a feed when it looks like XML or JSON, else as a text dump."""
    if looks_like_feed(data):
        return parse_feed(data, name)
    return parse_dump(data, name)
