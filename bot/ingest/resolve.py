"""Ingest: which stored entry each of a source's entries is, and what it becomes.

The identity precedence (arXiv id, DOI, key, normalized title; DUMPS.md) and
the merge policy (what a later source may change in a known entry) as plain
functions over in-memory records.  Must never touch the store: the caller
loads the candidates and writes the outcome.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, NamedTuple

from bot.domain import Announce, EntryKind, ParsedEntry, TagOrigin
from bot.domain.identity import entry_key, key_for_title_hash, normalize_title, title_hash
from bot.domain.links import code_links
from bot.domain.text import urls_in


@dataclass(slots=True)
class EntryRecord:
    """One entry as this ingest sees it: its stored columns plus what this source
    changes (mutable scratch state, never outlives one ingest)."""

    id: int | None
    key: str
    kind: str
    title: str
    title_norm: str
    authors: list[str]
    published: date | None
    summary: str
    summary_type: str
    summary_source_id: int | None
    links: list[str]
    arxiv_id: str | None
    doi: str | None
    extra: dict[str, str]
    dirty: bool = False
    created: bool = False
    # The summary before this source changed it; NULL variants get it written in.
    replaced_summary: str | None = None
    summary_changed: bool = False
    # What a revision (arXiv ``replace``) changed, for those who had the entry before.
    revision: str | None = None
    # A paper that this source gave a code or model link it had not had: news for
    # readers who keep it in their library (``bot.plan.news``).
    linked: bool = False
    # Category tags this source gives the entry: (case-folded name, origin) -> label.
    tags: dict[tuple[str, TagOrigin], str] = field(default_factory=dict)


# The stored columns of an EntryRecord, in the order the store selects them.
RECORD_COLUMNS = (
    "id",
    "key",
    "kind",
    "title",
    "title_norm",
    "authors",
    "published",
    "summary",
    "summary_type",
    "summary_source_id",
    "links",
    "arxiv_id",
    "doi",
    "extra",
)


class KeyedEntry(NamedTuple):
    """A parsed entry with the key it would be stored under and its normalized title."""

    item: ParsedEntry
    key: str
    title_norm: str


class Lookups(NamedTuple):
    """The values to look stored entries up by, one indexed ``IN (...)`` per field."""

    arxiv_ids: list[str]
    dois: list[str]
    keys: list[str]
    title_hashes: list[int]


class Appearance(NamedTuple):
    """An entry's first place in the source: one appearance row per entry and source."""

    record: EntryRecord
    item: ParsedEntry
    position: int


@dataclass(frozen=True, slots=True)
class Resolution:
    records: list[EntryRecord]  # every entry of the source once, in order of first appearance
    appearances: list[Appearance]


def keyed(entries: Iterable[ParsedEntry]) -> list[KeyedEntry]:
    out = []
    for entry in entries:
        title_norm = normalize_title(entry.title)
        out.append(KeyedEntry(entry, entry_key(entry, title_norm), title_norm))
    return out


def lookups(items: Sequence[KeyedEntry], hashes: dict[str, int]) -> Lookups:
    """What to load so that ``IdentityIndex.find`` sees every stored entry that could match.

    A title is found either through the key (a paper keyed by its own title,
    whose title_hash column is NULL) or through the partial title_hash index.
    """
    papers = [i.title_norm for i in items if i.item.kind is EntryKind.PAPER]
    return Lookups(
        arxiv_ids=sorted({i.item.arxiv_id for i in items if i.item.arxiv_id}),
        dois=sorted({i.item.doi for i in items if i.item.doi}),
        keys=sorted({i.key for i in items} | {key_for_title_hash(hashes[t]) for t in papers}),
        title_hashes=sorted({hashes[t] for t in papers}),
    )


class IdentityIndex:
    """Known entries, findable by each identity DUMPS.md names."""

    def __init__(self) -> None:
        self.by_key: dict[str, EntryRecord] = {}
        self.by_arxiv: dict[str, EntryRecord] = {}
        self.by_doi: dict[str, EntryRecord] = {}
        self.by_title: dict[str, list[EntryRecord]] = {}

    def add(self, record: EntryRecord) -> None:
        self.by_key[record.key] = record
        if record.arxiv_id:
            self.by_arxiv[record.arxiv_id] = record
        if record.doi:
            self.by_doi[record.doi] = record
        if record.kind == EntryKind.PAPER:
            self.by_title.setdefault(record.title_norm, []).append(record)

    def find(self, item: ParsedEntry, key: str, title_norm: str) -> EntryRecord | None:
        """The known entry *item* is, by arXiv id, then DOI, then key, then title."""
        found = (
            (item.arxiv_id and self.by_arxiv.get(item.arxiv_id))
            or (item.doi and self.by_doi.get(item.doi))
            or self.by_key.get(key)
        )
        if found:
            return found
        if item.kind is EntryKind.PAPER:
            for record in self.by_title.get(title_norm, ()):
                if not _ids_conflict(item, record):
                    return record
        return None


def _ids_conflict(item: ParsedEntry, record: EntryRecord) -> bool:
    """Same title but two different ids: two papers that share a title."""
    return bool(
        (item.arxiv_id and record.arxiv_id and record.arxiv_id != item.arxiv_id)
        or (item.doi and record.doi and record.doi != item.doi)
    )


def merge_changes(known: EntryRecord, item: ParsedEntry, title_norm: str) -> dict[str, Any]:
    """The fields of *known* that *item* changes, with their new values.

    The latest summary wins (every variant stays in the appearances); ids are
    learned, never replaced; a revised paper (``replace``) may change title,
    authors and date, never the key; links are the union, with the code and model
    links a summary names (so a later summary without them takes none away); extra
    fields merge.
    """
    wanted: dict[str, Any] = {}
    if item.summary and item.summary != known.summary:
        wanted["summary"] = item.summary
        wanted["summary_type"] = item.summary_type
    if item.arxiv_id and not known.arxiv_id:
        wanted["arxiv_id"] = item.arxiv_id
    if item.doi and not known.doi:
        wanted["doi"] = item.doi
    if item.announce in (Announce.REPLACE, Announce.REPLACE_CROSS):
        wanted.update(title=item.title, title_norm=title_norm, authors=list(item.authors))
        if item.published:
            wanted["published"] = item.published
    wanted["links"] = merged_links(known.links, links_of(item))
    if item.extra:
        wanted["extra"] = {**known.extra, **dict(item.extra)}
    return {name: value for name, value in wanted.items() if getattr(known, name) != value}


def merged_links(known: Iterable[str], new: Iterable[str]) -> list[str]:
    links: dict[str, str] = {}
    for url in (*known, *new):
        links.setdefault(_link_identity(url), url)
    return list(links.values())


# Code and model links kept from one summary: a paper names a repository or two, and a
# summary of thousands would otherwise make every later look at the entry longer.
MAX_NAMED_CODE_LINKS = 10


def links_of(item: ParsedEntry) -> list[str]:
    """An item's links and the first code and model links its summary names (a feed's
    abstract: "code at https://github.com/..."), each once."""
    return merged_links(item.links, code_links(urls_in(item.summary))[:MAX_NAMED_CODE_LINKS])


def gained_code(before: Iterable[str], after: Iterable[str]) -> bool:
    """Whether *after* holds a code or model link that *before* had not."""
    known = {_link_identity(url) for url in code_links(before)}
    return any(_link_identity(url) not in known for url in code_links(after))


def _link_identity(url: str) -> str:
    # GitHub owner/name is case-insensitive (DUMPS.md); other URLs may not be.
    lowered = url.lower()
    return lowered if lowered.startswith(("https://github.com/", "http://github.com/")) else url


def revision_note(old_title: str, changes: dict[str, Any], announce: Announce) -> str | None:
    """What a revised paper (``replace``) changed that a reader would want told: a new
    title (the old one quoted), a new abstract; None for anything else."""
    if announce not in (Announce.REPLACE, Announce.REPLACE_CROSS):
        return None
    said = []
    if "title_norm" in changes:  # not a change of case or spacing alone
        said.append(f'title was "{old_title}"')
    if "summary" in changes:
        said.append("abstract revised")
    return "; ".join(said) or None


def _merge(record: EntryRecord, item: ParsedEntry, title_norm: str) -> None:
    changes = merge_changes(record, item, title_norm)
    if not changes:
        return
    if not record.created:
        record.revision = revision_note(record.title, changes, item.announce) or record.revision
    if record.kind == EntryKind.PAPER and "links" in changes:
        record.linked = record.linked or gained_code(record.links, changes["links"])
    if "summary" in changes:
        if record.replaced_summary is None and not record.created:
            record.replaced_summary = record.summary
        record.summary_changed = True
    for name, value in changes.items():
        setattr(record, name, value)
    record.dirty = True


def _new_record(entry: KeyedEntry, source_id: int) -> EntryRecord:
    item = entry.item
    record = EntryRecord(
        id=None,
        key=entry.key,
        kind=str(item.kind),
        title=item.title,
        title_norm=entry.title_norm,
        authors=list(item.authors),
        published=item.published,
        summary=item.summary,
        summary_type=item.summary_type,
        summary_source_id=source_id,
        links=links_of(item),
        arxiv_id=item.arxiv_id,
        doi=item.doi,
        extra=dict(item.extra),
        created=True,
    )
    record.linked = item.kind is EntryKind.PAPER and bool(code_links(record.links))
    return record


def resolve(items: Sequence[KeyedEntry], index: IdentityIndex, source_id: int) -> Resolution:
    """Match each item to a known entry (merging what it says) or a new one, in order:
    an entry that appears twice in one source merges with its own first appearance."""
    seen: set[int] = set()
    records: list[EntryRecord] = []
    appearances: list[Appearance] = []
    for position, (item, key, title_norm) in enumerate(items):
        record = index.find(item, key, title_norm)
        if record is None:
            record = _new_record(KeyedEntry(item, key, title_norm), source_id)
            index.add(record)
        else:
            _merge(record, item, title_norm)
        if id(record) not in seen:
            seen.add(id(record))
            appearances.append(Appearance(record, item, position))
            records.append(record)
        for label in item.tags:
            record.tags.setdefault((label.casefold(), TagOrigin.CATEGORY), label)
    return Resolution(records, appearances)


def indexed_title_hash(key: str, kind: str, hashed: int) -> int | None:
    """What goes in ``entries.title_hash``: NULL when a title look-up already
    finds the entry through its key, or when it is a repo (never matched by title)."""
    if kind != EntryKind.PAPER or key == key_for_title_hash(hashed):
        return None
    return hashed


def title_hashes(items: Iterable[KeyedEntry]) -> dict[str, int]:
    return {i.title_norm: title_hash(i.title_norm) for i in items}
