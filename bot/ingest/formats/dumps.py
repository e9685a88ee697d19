"""Text dump parser (format: ``../shared/DUMPS.md``).

A dump is blocks separated by blank lines: an optional ``Filtered by:`` header,
then entries of four blocks each (title, meta, summary, link label).  The parser
accepts CRLF/CR line ends, a UTF-8 BOM and trailing spaces, keeps summaries
verbatim (LaTeX is converted at render time) and rejects anything else with a
``DumpFormatError`` naming the line.  It never guesses past an ambiguity: a
dump either parses whole or fails whole, so a bad file changes nothing.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from datetime import date
from typing import NamedTuple

from bot.domain import EntryContent, EntryKind, ParsedEntry, ParsedSource
from bot.domain.identity import is_repo_name
from bot.domain.text import tag_label, urls_in
from bot.ingest.formats.format_errors import SourceFormatError, quoted

LINK_LABELS = frozenset({"PDF", "Code"})
TAG_SEPARATOR = "\u00d7"  # "×"
_CLEAR_ALL = "clear all"
_HEADER_PREFIX = "filtered by:"

_DATE = r"(?P<date>\d{4}-\d{2}-\d{2})"
_DATE_RE = re.compile(_DATE)
_REPO_META_RE = re.compile(rf"^(?P<owner>\S+)\s+{_DATE}(?:\s+(?P<stars>[\d,]+))?(?:\s+(?P<language>.+))?$")
_COUNTS_RE = re.compile(r"^(?P<stars>[\d,]+)\s+(?P<forks>[\d,]+)$")


# About twice the blocks of a dump as big as watch.max_file_bytes allows: past
# this a file is not a dump, and its entries would outgrow memory (docs/input.md: the bound).
MAX_BLOCKS = 400_000


class DumpFormatError(SourceFormatError):
    """A text dump that does not follow DUMPS.md."""


class _Block(NamedTuple):
    # A NamedTuple, not a frozen dataclass: a big dump makes tens of thousands
    # of these, and frozen dataclasses are much slower to construct.
    line: int  # 1-based line number of the block's first line
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def is_link_label(self) -> bool:
        return len(self.lines) == 1 and self.lines[0] in LINK_LABELS


def decode_text(data: bytes, name: str, error: type[SourceFormatError] = DumpFormatError) -> str:
    """Bytes to text with LF line ends: UTF-8 (BOM allowed), no NUL bytes."""
    nul = data.find(b"\x00")
    if nul != -1:
        raise error(name, data.count(b"\n", 0, nul) + 1, f"binary data (NUL byte at offset {nul}); expected UTF-8 text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            name, line, f"not UTF-8: byte 0x{data[exc.start]:02X} at offset {exc.start} ({exc.reason})"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


# The line end before a run of blank (or whitespace-only) lines, with those lines: what
# separates two blocks.  Linear: each alternative ends at the next line end.
_BLANK_RUN = re.compile(r"\n(?:[^\S\n]*\n)+")


def _blocks(text: str) -> Iterator[_Block]:
    """Blocks one at a time, each with its first line number (a dump is never held as a
    list of blocks: ten million one-letter blocks would be gigabytes of objects)."""
    padded = "\n" + text + "\n\n"  # every block ends at a separator, line numbers count from the first "\n"
    pos, line, counted = 1, 1, 1
    for separator in _BLANK_RUN.finditer(padded):
        start = separator.start()
        if start > pos:
            line += padded.count("\n", counted, pos)
            counted = pos
            yield _Block(line, tuple(part.rstrip() for part in padded[pos:start].split("\n")))
        pos = max(pos, separator.end())


class _Lookahead:
    """An iterator of blocks that can look a few blocks ahead."""

    def __init__(self, blocks: Iterator[_Block], name: str) -> None:
        self._blocks = blocks
        self._ahead: deque[_Block] = deque()
        self._name = name
        self.taken = 0

    def peek(self, offset: int = 0) -> _Block | None:
        while len(self._ahead) <= offset:
            block = next(self._blocks, None)
            if block is None:
                return None
            self._ahead.append(block)
        return self._ahead[offset]

    def take(self) -> _Block:
        block = self.peek()
        assert block is not None
        self._ahead.popleft()
        self.taken += 1
        if self.taken > MAX_BLOCKS:
            raise DumpFormatError(
                self._name, block.line, f"more than {MAX_BLOCKS:,} blocks; too big to be one dump (split it)"
            )
        return block


def _header_tags(block: _Block) -> tuple[str, ...] | None:
    first = block.lines[0].strip()
    if not first.casefold().startswith(_HEADER_PREFIX):
        return None
    raw = " ".join(line.strip() for line in block.lines)[len(_HEADER_PREFIX) :]
    tags = []
    for part in raw.split(TAG_SEPARATOR):
        tag = tag_label(part)
        if tag and tag.casefold() != _CLEAR_ALL and tag not in tags:
            tags.append(tag)
    return tuple(tags)


def _paper_meta(line: str) -> tuple[str, str] | None:
    """(authors, date) of ``<authors> YYYY-MM-DD``; by slicing, not by a regex whose
    lazy authors and spaces before the date backtrack quadratically."""
    if len(line) < 10 or not _DATE_RE.fullmatch(line, len(line) - 10):
        return None
    return line[:-10].rstrip(), line[-10:]


def _is_meta(block: _Block) -> bool:
    return _paper_meta(block.lines[0]) is not None or _REPO_META_RE.match(block.lines[0]) is not None


def _parse_date(value: str, name: str, line: int) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        shown = f" {quoted(value)}" if _DATE_RE.fullmatch(value) else ""
        raise DumpFormatError(name, line, f"invalid date{shown} (expected YYYY-MM-DD)") from None


def _repo_meta(title: str, shown: str, meta: _Block, name: str) -> tuple[date, dict[str, str]]:
    first = _REPO_META_RE.match(meta.lines[0])
    if first is None:
        raise DumpFormatError(
            name, meta.line, f"expected '<owner> YYYY-MM-DD <stars> <language>' for repository {shown}"
        )
    extra = {"owner": first["owner"]}
    if first["stars"]:
        extra["stars"] = first["stars"].replace(",", "")
    if first["language"]:
        extra["language"] = first["language"].strip()
    for line in meta.lines[1:]:
        text = line.strip()
        counts = _COUNTS_RE.match(text)
        if counts:
            extra["stars"] = counts["stars"].replace(",", "")
            extra["forks"] = counts["forks"].replace(",", "")
        elif text.casefold().split(" ")[0] == title.casefold():
            language = text[len(title) :].strip()
            if language:
                extra.setdefault("language", language)
        else:
            extra.setdefault("description", text)
    return _parse_date(first["date"], name, meta.line), extra


class _Meta(NamedTuple):
    kind: EntryKind
    published: date
    authors: tuple[str, ...]
    extra: dict[str, str]


def _entry(blocks: _Lookahead, name: str, *, first: bool) -> ParsedEntry:
    """Parse the entry whose title is the next block.  A message quotes its title once
    the file has shown itself a dump: until an entry was read, it may be any file
    (/etc/shadow named by mistake), whose lines no message or record may repeat."""
    title_block = blocks.take()
    title = _title(title_block, name)
    shown = f"on line {title_block.line}" if first else quoted(title)
    if blocks.peek() is None:
        raise DumpFormatError(
            name,
            title_block.line,
            f"entry {shown} is truncated: expected '<authors> YYYY-MM-DD' after the title",
        )
    meta_block = blocks.take()
    meta = _meta(title, shown, meta_block, name)
    summary = _summary(blocks, shown, meta_block, name)
    links: tuple[str, ...] = ()
    repo = None
    if meta.kind is EntryKind.REPO:
        repo = title
        links = (f"https://github.com/{title}",)
    links += tuple(u for u in urls_in(summary) if u not in links)
    content = EntryContent(
        kind=meta.kind,
        title=title,
        authors=meta.authors,
        published=meta.published,
        summary=summary,
        links=links,
        extra=tuple(sorted(meta.extra.items())),
    )
    return ParsedEntry(content, line=title_block.line, repo=repo)


def _title(block: _Block, name: str) -> str:
    if block.is_link_label:
        raise DumpFormatError(name, block.line, f"expected an entry title, found link label {quoted(block.lines[0])}")
    if len(block.lines) == 1:
        return block.lines[0].strip()
    return " ".join(line.strip() for line in block.lines)


def _meta(title: str, shown: str, meta: _Block, name: str) -> _Meta:
    """A repository's owner line (with stars and language) or a paper's authors and date."""
    if is_repo_name(title) and _REPO_META_RE.match(meta.lines[0]):
        published, extra = _repo_meta(title, shown, meta, name)
        return _Meta(EntryKind.REPO, published, (extra["owner"],), extra)
    paper = _paper_meta(meta.lines[0])
    if paper is None or len(meta.lines) != 1:
        raise DumpFormatError(name, meta.line, f"expected '<authors, comma separated> YYYY-MM-DD' after title {shown}")
    authors = tuple(a.strip() for a in paper[0].split(",") if a.strip())
    return _Meta(EntryKind.PAPER, _parse_date(paper[1], name, meta.line), authors, {})


def _summary(blocks: _Lookahead, shown: str, meta: _Block, name: str) -> str:
    """The paragraphs up to the link label that ends the entry (taken too)."""
    paragraphs: list[str] = []
    last = meta
    while True:
        block = blocks.peek()
        if block is None:
            raise DumpFormatError(
                name,
                last.line + len(last.lines) - 1,
                f"entry {shown} is truncated: expected link label PDF or Code after its summary",
            )
        if block.is_link_label:
            blocks.take()
            return "\n\n".join(paragraphs)
        # A one-line block followed by a meta block is the next entry's title:
        # this entry lost its link label.  Refuse rather than merge two entries.
        following = blocks.peek(1)
        if paragraphs and len(block.lines) == 1 and following is not None and _is_meta(following):
            raise DumpFormatError(
                name, block.line, f"expected link label PDF or Code to end entry {shown}, found another entry"
            )
        last = blocks.take()
        paragraphs.append(last.text)


def parse_dump(data: bytes, name: str) -> ParsedSource:
    """Parse a text dump; raise ``DumpFormatError`` naming the line on any deviation."""
    blocks = _Lookahead(_blocks(decode_text(data, name)), name)
    first = blocks.peek()
    if first is None:
        raise DumpFormatError(name, 0, "empty file: expected at least one entry")
    header = _header_tags(first)
    if header is not None:
        blocks.take()
        if blocks.peek() is None:
            raise DumpFormatError(name, first.line, "only a 'Filtered by:' header: expected at least one entry")
    entries: list[ParsedEntry] = []
    while blocks.peek() is not None:
        entries.append(_entry(blocks, name, first=not entries))
    return ParsedSource(format="dump", entries=tuple(entries), header_tags=header or ())
