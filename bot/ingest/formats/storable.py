"""Sources: what every parser's entries carry, made storable and bounded, once, for
every format (``parse_any`` applies it to what the format's parser returns).

Text loses what neither store can hold (NUL: PostgreSQL's text; a lone surrogate:
UTF-8) and what the personal feed's XML cannot carry; a lone surrogate becomes
U+FFFD.  Each field is bounded (docs/input.md, "Limits"): a title or summary past its
limit is cut at a word with "…", lists keep their first items, and an identifier or
link too long to be one is dropped.  Pure: never touches the store.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bot.domain import ParsedEntry, ParsedSource
from bot.domain.identity import MAX_DOI
from bot.domain.text import NOT_STORABLE, storable

TITLE_CHARACTERS = 500
SUMMARY_CHARACTERS = 10_000
AUTHORS = 500
AUTHOR_CHARACTERS = 200
TAGS = 50
LINKS = 20
LINK_CHARACTERS = 2_000
EXTRA_FIELDS = 20
EXTRA_CHARACTERS = 200
DOI_CHARACTERS = MAX_DOI
# What a summary's type may say: the renderer knows HTML and plain text.
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", "html", "xhtml"})
_STORED_TYPES = frozenset({"text/plain", "text/html"})
# The content fields the rules below name; any other (one added later) is bounded by
# its value: a text as an author's name is, a list of texts as the links are.
_RULED_FIELDS = frozenset(
    {"kind", "title", "authors", "published", "summary", "summary_type", "links", "arxiv_id", "doi", "extra"}
)


def cut(text: str, limit: int) -> str:
    """*text* in at most *limit* characters: whole, or cut at the last space in its
    last tenth (else mid-word) and ended with "…"."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ", limit - limit // 10)
    return (head[:space] if space > 0 else head).rstrip() + "…"


def storable_source(source: ParsedSource) -> ParsedSource:
    """*source* with every entry storable and bounded (the same object when it was)."""
    entries = tuple(storable_entry(entry) for entry in source.entries)
    title = cut(storable(source.title), TITLE_CHARACTERS)
    tags = tuple(storable(tag) for tag in source.header_tags[:TAGS])
    same = all(new is old for new, old in zip(entries, source.entries, strict=True))
    if same and title == source.title and tags == source.header_tags:
        return source
    return replace(source, entries=entries, title=title, header_tags=tags)


def storable_entry(entry: ParsedEntry) -> ParsedEntry:
    """One entry storable and bounded; the same object when it already was (the common
    case: its summary searched once, its other text joined and searched once)."""
    content = entry.content
    if _fits(entry) and not NOT_STORABLE.search(content.summary) and not NOT_STORABLE.search(_short_texts(entry)):
        return entry
    return _bounded(entry)


def _fits(entry: ParsedEntry) -> bool:
    content = entry.content
    return (
        len(content.title) <= TITLE_CHARACTERS
        and len(content.summary) <= SUMMARY_CHARACTERS
        and content.summary_type in _STORED_TYPES
        and len(content.doi or "") <= DOI_CHARACTERS
        and len(content.authors) <= AUTHORS
        and max(map(len, content.authors), default=0) <= AUTHOR_CHARACTERS
        and len(entry.tags) <= TAGS
        and len(content.links) <= LINKS
        and max(map(len, content.links), default=0) <= LINK_CHARACTERS
        and (not content.extra or _extra_fits(content.extra))
        and all(_other_fits(getattr(content, name)) for name in content.fields_besides(_RULED_FIELDS))
    )


def _extra_fits(extra: tuple[tuple[str, str], ...]) -> bool:
    return len(extra) <= EXTRA_FIELDS and all(
        _kept_extra(key) and len(value) <= EXTRA_CHARACTERS for key, value in extra
    )


def _short_texts(entry: ParsedEntry) -> str:
    content = entry.content
    extra = [text for pair in content.extra for text in pair] if content.extra else ()
    return "\n".join(
        (
            content.title,
            *content.authors,
            *entry.tags,
            *content.links,
            content.doi or "",
            content.arxiv_id or "",
            entry.repo or "",
            *extra,
            *(text for name in content.fields_besides(_RULED_FIELDS) for text in _texts(getattr(content, name))),
        )
    )


def _bounded(entry: ParsedEntry) -> ParsedEntry:
    content = entry.content
    doi = storable(content.doi) if content.doi else None
    others: dict[str, Any] = {
        name: _bounded_other(getattr(content, name)) for name in content.fields_besides(_RULED_FIELDS)
    }
    bounded = replace(
        content,
        title=cut(storable(content.title), TITLE_CHARACTERS),
        summary=cut(storable(content.summary), SUMMARY_CHARACTERS),
        summary_type="text/html" if content.summary_type.lower() in _HTML_TYPES else "text/plain",
        authors=tuple(cut(storable(name), AUTHOR_CHARACTERS) for name in content.authors[:AUTHORS]),
        links=tuple(link for link in (storable(x) for x in content.links[:LINKS]) if len(link) <= LINK_CHARACTERS),
        doi=doi if doi and len(doi) <= DOI_CHARACTERS else None,
        arxiv_id=storable(content.arxiv_id) if content.arxiv_id else None,
        extra=tuple(
            (storable(key), cut(storable(value), EXTRA_CHARACTERS))
            for key, value in content.extra[:EXTRA_FIELDS]
            if _kept_extra(key)
        ),
        **others,
    )
    return replace(
        entry,
        content=bounded,
        tags=tuple(storable(tag) for tag in entry.tags[:TAGS]),
        repo=storable(entry.repo) if entry.repo else None,
    )


def _texts(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, tuple):
        return tuple(item for item in value if isinstance(item, str))
    return ()


def _other_fits(value: object) -> bool:
    if isinstance(value, str):
        return len(value) <= AUTHOR_CHARACTERS
    if isinstance(value, tuple):
        return len(value) <= LINKS and all(len(text) <= AUTHOR_CHARACTERS for text in _texts(value))
    return True


def _bounded_other(value: object) -> object:
    if isinstance(value, str):
        return cut(storable(value), AUTHOR_CHARACTERS)
    if isinstance(value, tuple):
        return tuple(
            cut(storable(text), AUTHOR_CHARACTERS) if isinstance(text, str) else text for text in value[:LINKS]
        )
    return value


def _kept_extra(key: str) -> bool:
    """An extra field's name (stars, forks, language) is a word, never a text."""
    return len(key) <= EXTRA_CHARACTERS // 2
