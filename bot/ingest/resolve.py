"""Ingest: which stored entry each of a source's entries is, and what it becomes.

The identity precedence (arXiv id, DOI, key, normalized title; DUMPS.md) and
the merge policy (what a later source may change in a known entry) as plain
functions over in-memory records.  Must never touch the store: the caller
loads the candidates and writes the outcome.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from bot.domain import Announce, EntryContent, EntryKind, ParsedEntry, TagOrigin
from bot.domain.identity import entry_key, key_for_title_hash, normalize_title, title_hash
from bot.domain.links import code_links
from bot.domain.text import urls_in


@dataclass(slots=True)
class EntryRecord:
    """One entry as this ingest sees it: what the store holds of it plus what this
    source changes (mutable scratch state, never outlives one ingest)."""

    id: int | None
    key: str
    title_norm: str
    content: EntryContent
    summary_source_id: int | None
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


class FirstPlacement(NamedTuple):
    """An entry's first place in the source: one appearance row per entry and source."""

    record: EntryRecord
    item: ParsedEntry
    position: int


@dataclass(frozen=True, slots=True)
class Resolution:
    records: list[EntryRecord]  # every entry of the source once, in order of first appearance
    appearances: list[FirstPlacement]


def keyed(entries: Iterable[ParsedEntry]) -> list[KeyedEntry]:
    out = []
    for entry in entries:
        title_norm = normalize_title(entry.content.title)
        out.append(KeyedEntry(entry, entry_key(entry, title_norm), title_norm))
    return out


def lookups(items: Sequence[KeyedEntry], hashes: dict[str, int]) -> Lookups:
    """What to load so that ``IdentityIndex.find`` sees every stored entry that could match.

    A title is found either through the key (a paper keyed by its own title,
    whose title_hash column is NULL) or through the partial title_hash index.
    """
    papers = [i.title_norm for i in items if i.item.content.kind is EntryKind.PAPER]
    return Lookups(
        arxiv_ids=sorted({i.item.content.arxiv_id for i in items if i.item.content.arxiv_id}),
        dois=sorted({i.item.content.doi for i in items if i.item.content.doi}),
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
        content = record.content
        if content.arxiv_id:
            self.by_arxiv[content.arxiv_id] = record
        if content.doi:
            self.by_doi[content.doi] = record
        if content.kind is EntryKind.PAPER:
            self.by_title.setdefault(record.title_norm, []).append(record)

    def find(self, item: ParsedEntry, key: str, title_norm: str) -> EntryRecord | None:
        """The known entry *item* is, by arXiv id, then DOI, then key, then title."""
        content = item.content
        found = (
            (content.arxiv_id and self.by_arxiv.get(content.arxiv_id))
            or (content.doi and self.by_doi.get(content.doi))
            or self.by_key.get(key)
        )
        if found:
            return found
        if content.kind is EntryKind.PAPER:
            for record in self.by_title.get(title_norm, ()):
                if not _ids_conflict(content, record.content):
                    return record
        return None


def _ids_conflict(new: EntryContent, known: EntryContent) -> bool:
    """Same title but two different ids: two papers that share a title."""
    return bool(
        (new.arxiv_id and known.arxiv_id and known.arxiv_id != new.arxiv_id)
        or (new.doi and known.doi and known.doi != new.doi)
    )


# The content fields ``merge_changes`` has a rule for; any other takes the later
# listing's value when it has one (not None, empty text or an empty list).
_RULED_FIELDS = frozenset(
    {"kind", "title", "authors", "published", "summary", "summary_type", "links", "arxiv_id", "doi", "extra"}
)

_REVISIONS = (Announce.REPLACE, Announce.REPLACE_CROSS)


def merge_changes(known: EntryRecord, item: ParsedEntry, title_norm: str) -> dict[str, Any]:
    """The content fields of *known* that *item* changes, with their new values (and
    ``title_norm`` when the title changes more than its case or spacing).

    The latest summary wins (every variant stays in the appearances); ids are
    learned, never replaced; a revised paper (``replace``) may change title,
    authors and date, never the key or the kind; links are the union, with the code
    and model links a summary names (so a later summary without them takes none
    away); extra fields merge; any other field takes the later listing's value.
    """
    old, new = known.content, item.content
    wanted = _learned(old, new)
    if item.announce in _REVISIONS:
        wanted.update(title=new.title, authors=new.authors)
        if new.published:
            wanted["published"] = new.published
    wanted["links"] = merged_links(old.links, links_of(item))
    if new.extra:
        wanted["extra"] = tuple(sorted({**dict(old.extra), **dict(new.extra)}.items()))
    for name in new.fields_besides(_RULED_FIELDS):
        value = getattr(new, name)
        if value is not None and value not in ("", ()):
            wanted[name] = value
    changes = {name: value for name, value in wanted.items() if getattr(old, name) != value}
    if "title" in changes and title_norm != known.title_norm:
        changes["title_norm"] = title_norm
    return changes


def _learned(old: EntryContent, new: EntryContent) -> dict[str, Any]:
    """The latest summary, and the ids *old* does not have yet."""
    wanted: dict[str, Any] = {}
    if new.summary and new.summary != old.summary:
        wanted["summary"] = new.summary
        wanted["summary_type"] = new.summary_type
    if new.arxiv_id and not old.arxiv_id:
        wanted["arxiv_id"] = new.arxiv_id
    if new.doi and not old.doi:
        wanted["doi"] = new.doi
    return wanted


def merged_links(known: Iterable[str], new: Iterable[str]) -> tuple[str, ...]:
    links: dict[str, str] = {}
    for url in (*known, *new):
        links.setdefault(_link_identity(url), url)
    return tuple(links.values())


# Code and model links kept from one summary: a paper names a repository or two, and a
# summary of thousands would otherwise make every later look at the entry longer.
MAX_NAMED_CODE_LINKS = 10


def links_of(item: ParsedEntry) -> tuple[str, ...]:
    """An item's links and the first code and model links its summary names (a feed's
    abstract: "code at https://github.com/..."), each once."""
    content = item.content
    return merged_links(content.links, code_links(urls_in(content.summary))[:MAX_NAMED_CODE_LINKS])


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
    if announce not in _REVISIONS:
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
    content = record.content
    if not record.created:
        record.revision = revision_note(content.title, changes, item.announce) or record.revision
    if content.kind is EntryKind.PAPER and "links" in changes:
        record.linked = record.linked or gained_code(content.links, changes["links"])
    if "summary" in changes:
        if record.replaced_summary is None and not record.created:
            record.replaced_summary = content.summary
        record.summary_changed = True
    record.title_norm = changes.pop("title_norm", record.title_norm)
    record.content = replace(content, **changes)
    record.dirty = True


def _new_record(entry: KeyedEntry, source_id: int) -> EntryRecord:
    content = entry.item.content
    links, extra = links_of(entry.item), tuple(sorted(dict(content.extra).items()))
    if links != content.links or extra != content.extra:
        content = replace(content, links=links, extra=extra)
    record = EntryRecord(
        id=None, key=entry.key, title_norm=entry.title_norm, content=content, summary_source_id=source_id, created=True
    )
    record.linked = content.kind is EntryKind.PAPER and bool(code_links(content.links))
    return record


def resolve(items: Sequence[KeyedEntry], index: IdentityIndex, source_id: int) -> Resolution:
    """Match each item to a known entry (merging what it says) or a new one, in order:
    an entry that appears twice in one source merges with its own first appearance."""
    seen: set[int] = set()
    records: list[EntryRecord] = []
    appearances: list[FirstPlacement] = []
    for position, (item, key, title_norm) in enumerate(items):
        record = index.find(item, key, title_norm)
        if record is None:
            record = _new_record(KeyedEntry(item, key, title_norm), source_id)
            index.add(record)
        else:
            _merge(record, item, title_norm)
        if id(record) not in seen:
            seen.add(id(record))
            appearances.append(FirstPlacement(record, item, position))
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
