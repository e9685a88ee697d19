"""Feed parser: RSS 2.0 and Atom 1.0 through feedparser, JSON Feed 1.x mapped by hand.

Entry categories become tags; arXiv entries are keyed by their id without the
version suffix and carry arXiv's ``announce_type`` so the store can tell a
``replace`` of a known paper from a new one.  Feed HTML is kept as HTML
(``summary_type`` says so); sanitizing is the renderer's job.  Never touches
the store or the network.
"""

from __future__ import annotations

import codecs
import html
import json
import re
import time
from datetime import date, datetime
from typing import Any

import feedparser
import nh3

from bot.domain import Announce, EntryKind, ParsedEntry, ParsedSource
from bot.ingest.formats.errors import SourceFormatError, quoted
from bot.ingest.identity import arxiv_id_in, doi_in
from bot.text import is_web_url, tag_label
from bot.text import one_line as _one_line

_ARXIV_ABSTRACT_PREFIX = re.compile(r"^\s*arXiv:\S+\s+Announce Type:\s*\S+\s*(?:Abstract:\s*)?", re.IGNORECASE)
_GITHUB_REPO_URL = re.compile(r"^https?://github\.com/([A-Za-z0-9-]+/[A-Za-z0-9._-]+?)/?$")
_JSONFEED_VERSION = "https://jsonfeed.org/version/1"


class FeedFormatError(SourceFormatError):
    """A feed document we cannot read."""


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


def _http_link(url: str) -> str:
    """The entry's link if it is a plain http(s) URL; anything else (javascript:,
    data:, relative, with spaces or control characters) is dropped."""
    url = url.strip()
    return url if is_web_url(url) else ""


def _authors(names: list[str]) -> tuple[str, ...]:
    # arXiv's RSS puts every author in one dc:creator, comma separated.
    out: list[str] = []
    for name in names:
        out.extend(part for part in (_one_line(p) for p in name.split(",")) if part)
    return tuple(out)


def _announce(value: str | None) -> Announce:
    try:
        return Announce((value or "new").strip().lower())
    except ValueError:
        return Announce.NEW


def _entry(
    *,
    title: str,
    ident: str,
    link: str,
    summary: str,
    summary_type: str,
    authors: tuple[str, ...],
    published: date | None,
    tags: tuple[str, ...],
    announce: Announce,
    doi_hint: str,
    line: int,
) -> ParsedEntry:
    link = _http_link(link)
    arxiv_id = arxiv_id_in(ident) or arxiv_id_in(link) or arxiv_id_in(summary[:200])
    doi = doi_in(doi_hint) or (doi_in(link) if "doi.org/" in link else None)
    if arxiv_id:
        summary = _ARXIV_ABSTRACT_PREFIX.sub("", summary, count=1)
    links = [link] if link else []
    if doi and f"https://doi.org/{doi}" not in links:
        links.append(f"https://doi.org/{doi}")
    repo_match = _GITHUB_REPO_URL.match(link) if link else None
    kind = EntryKind.REPO if repo_match and not arxiv_id else EntryKind.PAPER
    return ParsedEntry(
        kind=kind,
        title=title,
        authors=authors,
        published=published,
        summary=summary.strip(),
        summary_type=summary_type,
        line=line,
        links=tuple(links),
        tags=tuple(dict.fromkeys(t for t in tags if t)),
        arxiv_id=arxiv_id,
        doi=doi,
        repo=repo_match.group(1) if kind is EntryKind.REPO and repo_match else None,
        announce=announce,
    )


TITLE_FROM_TEXT = 80


def title_from(summary: str) -> str:
    """A title for an item that has none (RSS 2.0 allows description-only items): the
    start of its text, tags stripped, cut at a word within TITLE_FROM_TEXT characters."""
    text = _one_line(html.unescape(nh3.clean(summary, tags=set()))) if summary else ""
    if len(text) <= TITLE_FROM_TEXT:
        return text
    cut = text[: TITLE_FROM_TEXT - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut[20:] else cut).rstrip(" ,;:.") + "…"


def _quoted_id(value: object) -> str:
    """An item's id for a message: one line, at most 80 characters quoted."""
    return f"(id {quoted(_one_line(str(value)))})" if value else "(no id)"


def _struct_date(value: time.struct_time | None) -> date | None:
    return date(value.tm_year, value.tm_mon, value.tm_mday) if value else None


# feedparser's time grows with the elements (twice when the strict parse fails and
# its loose parser retries): beyond this a document would hold the watcher for
# minutes.  A 10,000-entry arXiv feed has well under half as many.
MAX_XML_ELEMENTS = 400_000


def _parse_xml(data: bytes, name: str) -> ParsedSource:
    if data.count(b"<") > MAX_XML_ELEMENTS:
        raise FeedFormatError(name, 0, f"more than {MAX_XML_ELEMENTS:,} XML elements; too big to be read as a feed")
    parsed = feedparser.parse(data, sanitize_html=False, resolve_relative_uris=False)
    if not parsed.version:
        exc = parsed.get("bozo_exception")
        line = exc.getLineNumber() if exc is not None and hasattr(exc, "getLineNumber") else 0
        reason = _one_line(str(exc)) if exc is not None else "no <rss> or <feed> root element"
        raise FeedFormatError(name, line or 0, f"not an RSS or Atom feed: {reason}")
    entries = []
    skipped = []
    for index, item in enumerate(parsed.entries, start=1):
        content = item.get("content") or []
        detail = content[0] if content else item.get("summary_detail") or {}
        summary = detail.get("value", item.get("summary", "")) or ""
        title = _one_line(item.get("title")) or title_from(summary)
        if not title:
            skipped.append(f"{name}: entry {index} {_quoted_id(item.get('id'))} has no title and no text; left out")
            continue
        names = [a.get("name", "") for a in item.get("authors", []) if isinstance(a, dict)]
        tags = tuple(tag_label(t.get("term") or t.get("label")) for t in item.get("tags", []))
        entries.append(
            _entry(
                title=title,
                ident=item.get("id", ""),
                link=item.get("link", ""),
                summary=summary,
                summary_type=detail.get("type", "text/html") or "text/html",
                authors=_authors(names),
                published=_struct_date(item.get("published_parsed") or item.get("updated_parsed")),
                tags=tags,
                announce=_announce(item.get("arxiv_announce_type")),
                doi_hint=" ".join(str(item.get(k, "")) for k in ("prism_doi", "arxiv_doi", "dc_identifier")),
                line=0,
            )
        )
    fmt = "atom" if parsed.version.startswith("atom") else "rss"
    return ParsedSource(
        format=fmt, entries=tuple(entries), title=_one_line(parsed.feed.get("title")), skipped=tuple(skipped)
    )


def _json_date(value: Any) -> date | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).date()
    except ValueError:
        return None


def _parse_json(data: bytes, name: str) -> ParsedSource:
    wide = wide_encoding(data)
    try:
        doc = json.loads(data[wide[1] :].decode(wide[0]) if wide else data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise FeedFormatError(name, 0, f"JSON Feed is not UTF-8: {exc.reason} at offset {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise FeedFormatError(name, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise FeedFormatError(name, 0, "JSON nested too deeply to be a feed") from None
    if not isinstance(doc, dict) or not str(doc.get("version", "")).startswith(_JSONFEED_VERSION):
        raise FeedFormatError(name, 1, f'not a JSON Feed: expected "version": "{_JSONFEED_VERSION}.1"')
    items = doc.get("items")
    if not isinstance(items, list):
        raise FeedFormatError(name, 0, 'JSON Feed has no "items" list')
    entries = []
    skipped = []
    for index, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            skipped.append(f"{name}: items[{index - 1}] is not an object; left out")
            continue
        if item.get("content_html"):
            summary, summary_type = str(item["content_html"]), "text/html"
        else:
            summary, summary_type = str(item.get("content_text") or item.get("summary") or ""), "text/plain"
        title = _one_line(str(item.get("title") or "")) or title_from(summary)
        if not title:
            skipped.append(
                f"{name}: items[{index - 1}] {_quoted_id(item.get('id'))} has no title and no text; left out"
            )
            continue
        people = item.get("authors") or ([item["author"]] if isinstance(item.get("author"), dict) else [])
        names = [str(p.get("name", "")) for p in people if isinstance(p, dict)]
        tags = tuple(tag_label(str(t)) for t in item.get("tags") or [] if isinstance(t, (str, int)))
        link = str(item.get("url") or item.get("external_url") or "")
        entries.append(
            _entry(
                title=title,
                ident=str(item.get("id", "")),
                link=link,
                summary=summary,
                summary_type=summary_type,
                authors=_authors(names),
                published=_json_date(item.get("date_published") or item.get("date_modified")),
                tags=tags,
                announce=_announce(
                    item.get("_arxiv", {}).get("announce_type") if isinstance(item.get("_arxiv"), dict) else None
                ),
                doi_hint=str(item.get("external_url") or "") + " " + str(item.get("id", "")),
                line=0,
            )
        )
    return ParsedSource(
        format="jsonfeed", entries=tuple(entries), title=_one_line(str(doc.get("title") or "")), skipped=tuple(skipped)
    )


def parse_feed(data: bytes, name: str) -> ParsedSource:
    """Parse an RSS 2.0, Atom 1.0 or JSON Feed 1.x document."""
    if _head(data).startswith("{"):
        return _parse_json(data, name)
    return _parse_xml(data, name)
