"""Sources: what RSS, Atom and JSON Feed items share once their fields are read.

Entry categories become tags; arXiv entries are keyed by their id without the
version suffix and carry arXiv's ``announce_type`` so the store can tell a
``replace`` of a known paper from a new one.  Feed HTML is kept as HTML
(``summary_type`` says so); sanitizing is the renderer's job.  Never touches
the store or the network.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

import nh3

from bot.domain import Announce, EntryContent, EntryKind, ParsedEntry, ParsedSource
from bot.domain.identity import arxiv_id_in, doi_in
from bot.domain.text import is_web_url, one_line
from bot.ingest.formats.format_errors import SourceFormatError, quoted

_ARXIV_ABSTRACT_PREFIX = re.compile(r"^\s*arXiv:\S+\s+Announce Type:\s*\S+\s*(?:Abstract:\s*)?", re.IGNORECASE)
_GITHUB_REPO_URL = re.compile(r"^https?://github\.com/([A-Za-z0-9-]+/[A-Za-z0-9._-]+?)/?$")
TITLE_FROM_TEXT = 80


class FeedFormatError(SourceFormatError):
    """A feed document we cannot read."""


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One feed item's fields, as its format's reader found them."""

    title: str
    ident: str
    link: str
    summary: str
    summary_type: str
    authors: tuple[str, ...]
    published: date | None
    tags: tuple[str, ...]
    announce: Announce
    doi_hint: str


def feed_entry(item: FeedItem) -> ParsedEntry:
    """The entry a feed item describes: its arXiv id or DOI found in its id, link or
    text, a GitHub repository link made a repo entry, unsafe links dropped."""
    link = _http_link(item.link)
    summary = item.summary
    arxiv_id = arxiv_id_in(item.ident) or arxiv_id_in(link) or arxiv_id_in(summary[:200])
    doi = doi_in(item.doi_hint) or (doi_in(link) if "doi.org/" in link else None)
    if arxiv_id:
        summary = _ARXIV_ABSTRACT_PREFIX.sub("", summary, count=1)
    repo = None if arxiv_id else _github_repo(link)
    content = EntryContent(
        kind=EntryKind.REPO if repo else EntryKind.PAPER,
        title=item.title,
        authors=item.authors,
        published=item.published,
        summary=summary.strip(),
        summary_type=item.summary_type,
        links=_links(link, doi),
        arxiv_id=arxiv_id,
        doi=doi,
    )
    return ParsedEntry(content, tags=tuple(dict.fromkeys(t for t in item.tags if t)), repo=repo, announce=item.announce)


def feed_source(format: str, title: object, items: Iterable[FeedItem | str]) -> ParsedSource:
    """A feed document's source from its items as the format's reader read them, each
    a ``FeedItem`` or the line that says why it was left out."""
    entries: list[ParsedEntry] = []
    skipped: list[str] = []
    for read in items:
        if isinstance(read, str):
            skipped.append(read)
        else:
            entries.append(feed_entry(read))
    return ParsedSource(format, tuple(entries), title=one_line(str(title or "")), skipped=tuple(skipped))


def _github_repo(link: str) -> str | None:
    match = _GITHUB_REPO_URL.match(link)
    return match.group(1) if match else None


def _links(link: str, doi: str | None) -> tuple[str, ...]:
    links = [link] if link else []
    if doi and f"https://doi.org/{doi}" not in links:
        links.append(f"https://doi.org/{doi}")
    return tuple(links)


def _http_link(url: str) -> str:
    """The entry's link if it is a plain http(s) URL; anything else (javascript:,
    data:, relative, with spaces or control characters) is dropped."""
    url = url.strip()
    return url if is_web_url(url) else ""


def authors(names: list[str]) -> tuple[str, ...]:
    # arXiv's RSS puts every author in one dc:creator, comma separated.
    out: list[str] = []
    for name in names:
        out.extend(part for part in (one_line(p) for p in name.split(",")) if part)
    return tuple(out)


def announce(value: str | None) -> Announce:
    try:
        return Announce((value or "new").strip().lower())
    except ValueError:
        return Announce.NEW


def title_from(summary: str) -> str:
    """A title for an item that has none (RSS 2.0 allows description-only items): the
    start of its text, tags stripped, cut at a word within TITLE_FROM_TEXT characters."""
    text = one_line(html.unescape(nh3.clean(summary, tags=set()))) if summary else ""
    if len(text) <= TITLE_FROM_TEXT:
        return text
    cut = text[: TITLE_FROM_TEXT - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut[20:] else cut).rstrip(" ,;:.") + "…"


def quoted_id(value: object) -> str:
    """An item's id for a message: one line, at most 80 characters quoted."""
    return f"(id {quoted(one_line(str(value)))})" if value else "(no id)"
