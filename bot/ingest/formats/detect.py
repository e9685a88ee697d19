"""Sources: which format a document is, from its first bytes (XML feed, JSON Feed or text dump).

Looks at a bounded head of the bytes only; never parses a whole document.
"""

from __future__ import annotations

import codecs
import re

_FEED_START = re.compile(r"^(?:<\?xml|<rss[\s>]|<feed[\s>]|<rdf:RDF[\s>]|<!--|<!DOCTYPE\s|\{\s*\")", re.IGNORECASE)
# UTF-32 before UTF-16: a UTF-32-LE byte order mark starts like a UTF-16-LE one.
_WIDE_ENCODINGS = (
    (codecs.BOM_UTF32_LE, b"<\x00\x00\x00", "utf-32-le"),
    (codecs.BOM_UTF32_BE, b"\x00\x00\x00<", "utf-32-be"),
    (codecs.BOM_UTF16_LE, b"<\x00", "utf-16-le"),
    (codecs.BOM_UTF16_BE, b"\x00<", "utf-16-be"),
)
_JSON_WIDE = {
    "utf-32-le": b"{\x00\x00\x00",
    "utf-32-be": b"\x00\x00\x00{",
    "utf-16-le": b"{\x00",
    "utf-16-be": b"\x00{",
}


def wide_encoding(data: bytes) -> tuple[str, int] | None:
    """(codec, byte-order-mark length) of a UTF-16 or UTF-32 document, by its BOM or by
    the NUL bytes around its first "<" or "{"; None for anything else."""
    for bom, xml_start, codec in _WIDE_ENCODINGS:
        if data.startswith(bom):
            return codec, len(bom)
        if data.startswith(xml_start) or data.startswith(_JSON_WIDE[codec]):
            return codec, 0
    return None


def _head(data: bytes) -> str:
    wide = wide_encoding(data)
    if wide is not None:
        codec, bom = wide
        return data[bom : bom + 2048].decode(codec, "ignore").lstrip(" \t\r\n")
    return data[:512].lstrip(b"\xef\xbb\xbf \t\r\n").decode("latin-1")


def looks_like_feed(data: bytes) -> bool:
    """An XML or JSON document (UTF-8, -16 or -32), as opposed to a text dump (whose
    first title may well start with "<" or "{")."""
    return bool(_FEED_START.match(_head(data)))


def looks_like_json(data: bytes) -> bool:
    """A feed that is JSON rather than XML (only meaningful when ``looks_like_feed``)."""
    return _head(data).startswith("{")
