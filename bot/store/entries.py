"""Store: writing entries, appearances and tags, resolving identity against the store in batches.

A source's entries are matched to stored ones with a handful of indexed
``IN (...)`` look-ups (arXiv id, DOI, key, normalized title) and written with
executemany inserts, so ingesting N entries costs O(N) whatever the store
already holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import bindparam, delete, literal, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from bot.choose.tagging import TagRules
from bot.domain import Announce, EntryKind, ParsedEntry, ParsedSource, TagOrigin, match_text
from bot.ingest.identity import entry_key, key_for_title_hash, normalize_title, title_hash
from bot.store.bulk import allocate_ids, bulk_insert, chunks, insert_ignoring_conflicts
from bot.store.schema import Appearance, Entry, EntryTag, Tag


@dataclass(slots=True)
class _Row:
    """The columns of one entry as resolution sees them (mutable scratch state)."""

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
    # Category tags this source gives the entry: (case-folded name, origin) -> label.
    tags: dict[tuple[str, TagOrigin], str] = field(default_factory=dict)


_ROW_COLUMNS = (
    Entry.id,
    Entry.key,
    Entry.kind,
    Entry.title,
    Entry.title_norm,
    Entry.authors,
    Entry.published,
    Entry.summary,
    Entry.summary_type,
    Entry.summary_source_id,
    Entry.links,
    Entry.arxiv_id,
    Entry.doi,
    Entry.extra,
)


@dataclass(frozen=True, slots=True)
class UpsertCounts:
    entries: int
    new: int
    updated: int


class _Index:
    """Stored and just-created entries, findable by each identity we know."""

    def __init__(self) -> None:
        self.by_key: dict[str, _Row] = {}
        self.by_arxiv: dict[str, _Row] = {}
        self.by_doi: dict[str, _Row] = {}
        self.by_title: dict[str, list[_Row]] = {}

    def add(self, row: _Row) -> None:
        self.by_key[row.key] = row
        if row.arxiv_id:
            self.by_arxiv[row.arxiv_id] = row
        if row.doi:
            self.by_doi[row.doi] = row
        if row.kind == EntryKind.PAPER:
            self.by_title.setdefault(row.title_norm, []).append(row)

    def find(self, item: ParsedEntry, key: str, title_norm: str) -> _Row | None:
        if item.arxiv_id and item.arxiv_id in self.by_arxiv:
            return self.by_arxiv[item.arxiv_id]
        if item.doi and item.doi in self.by_doi:
            return self.by_doi[item.doi]
        if key in self.by_key:
            return self.by_key[key]
        if item.kind is EntryKind.PAPER:
            for row in self.by_title.get(title_norm, ()):
                # Same title but two different ids: two papers that share a title.
                if item.arxiv_id and row.arxiv_id and row.arxiv_id != item.arxiv_id:
                    continue
                if item.doi and row.doi and row.doi != item.doi:
                    continue
                return row
        return None


def _load_candidates(session: Session, items: list[tuple[ParsedEntry, str, str]], hashes: dict[str, int]) -> _Index:
    index = _Index()
    arxiv = sorted({i.arxiv_id for i, _, _ in items if i.arxiv_id})
    dois = sorted({i.doi for i, _, _ in items if i.doi})
    # A title is found either through the key (a paper keyed by its own title,
    # whose title_hash column is NULL) or through the partial title_hash index.
    papers = [t for i, _, t in items if i.kind is EntryKind.PAPER]
    keys = sorted({k for _, k, _ in items} | {key_for_title_hash(hashes[t]) for t in papers})
    titles = sorted({hashes[t] for t in papers})
    seen: set[int] = set()
    for column, values in (
        (Entry.arxiv_id, arxiv),
        (Entry.doi, dois),
        (Entry.key, keys),
        (Entry.title_hash, titles),
    ):
        for part in chunks(values):
            for rec in session.execute(select(*_ROW_COLUMNS).where(column.in_(part))):
                if rec.id in seen:
                    continue
                seen.add(rec.id)
                index.add(_Row(**rec._asdict()))
    return index


def _indexed_title_hash(key: str, kind: str, hashed: int) -> int | None:
    """What goes in ``entries.title_hash``: NULL when a title look-up already
    finds the entry through its key, or when it is a repo (never matched by title)."""
    if kind != EntryKind.PAPER or key == key_for_title_hash(hashed):
        return None
    return hashed


def _merge(row: _Row, item: ParsedEntry, title_norm: str) -> None:
    """Fold what *item* says about a known entry into *row* (marking it dirty)."""

    def set_(name: str, value: Any) -> None:
        if getattr(row, name) != value:
            setattr(row, name, value)
            row.dirty = True

    # The latest summary wins; every variant stays in entry_appearances.
    if item.summary and item.summary != row.summary:
        if row.replaced_summary is None and not row.created:
            row.replaced_summary = row.summary
        row.summary_changed = True
        set_("summary", item.summary)
        set_("summary_type", item.summary_type)
    if item.arxiv_id and not row.arxiv_id:
        set_("arxiv_id", item.arxiv_id)
    if item.doi and not row.doi:
        set_("doi", item.doi)
    if item.announce in (Announce.REPLACE, Announce.REPLACE_CROSS):
        # A revised paper may change title, authors and date; the key stays.
        set_("title", item.title)
        set_("title_norm", title_norm)
        set_("authors", list(item.authors))
        if item.published:
            set_("published", item.published)
    links: dict[str, str] = {}
    for url in (*row.links, *item.links):
        links.setdefault(_link_identity(url), url)
    set_("links", list(links.values()))
    if item.extra:
        set_("extra", {**row.extra, **dict(item.extra)})


def _link_identity(url: str) -> str:
    # GitHub owner/name is case-insensitive (DUMPS.md); other URLs may not be.
    lowered = url.lower()
    return lowered if lowered.startswith(("https://github.com/", "http://github.com/")) else url


def ensure_tags(session: Session, labels: Iterable[str]) -> dict[str, int]:
    """Tag ids by case-folded name, creating the missing tags."""
    wanted: dict[str, str] = {}
    for label in labels:
        wanted.setdefault(label.casefold(), label)
    ids: dict[str, int] = {}
    names = sorted(wanted)
    for part in chunks(names):
        ids.update(session.execute(select(Tag.name, Tag.id).where(Tag.name.in_(part))).all())
    missing = [{"name": n, "label": wanted[n]} for n in names if n not in ids]
    if missing:
        insert_ignoring_conflicts(session, Tag.__table__, missing)
        for part in chunks([m["name"] for m in missing]):
            ids.update(session.execute(select(Tag.name, Tag.id).where(Tag.name.in_(part))).all())
    return ids


def upsert_source_entries(
    session: Session, source_id: int, parsed: ParsedSource, now: datetime, rules: TagRules | None = None
) -> UpsertCounts:
    """Store every entry of *parsed* once, record its appearance in *source_id*,
    attach header and category tags, and (re)compute rule tags of the entries
    that are new or whose text changed.  Caller owns the transaction."""
    items = []
    for e in parsed.entries:
        title_norm = normalize_title(e.title)
        items.append((e, entry_key(e, title_norm), title_norm))
    hashes = {t: title_hash(t) for _, _, t in items}
    index = _load_candidates(session, items, hashes)

    appearances: dict[int, tuple[_Row, ParsedEntry, int]] = {}
    ordered: list[_Row] = []
    for position, (item, key, title_norm) in enumerate(items):
        row = index.find(item, key, title_norm)
        if row is None:
            row = _Row(
                id=None,
                key=key,
                kind=str(item.kind),
                title=item.title,
                title_norm=title_norm,
                authors=list(item.authors),
                published=item.published,
                summary=item.summary,
                summary_type=item.summary_type,
                summary_source_id=source_id,
                links=list(item.links),
                arxiv_id=item.arxiv_id,
                doi=item.doi,
                extra=dict(item.extra),
                created=True,
            )
            index.add(row)
        else:
            _merge(row, item, title_norm)
        if id(row) not in appearances:
            appearances[id(row)] = (row, item, position)
            ordered.append(row)
        for label in item.tags:
            row.tags.setdefault((label.casefold(), TagOrigin.CATEGORY), label)

    created = [r for r in ordered if r.created]
    if created:
        # Ids are allocated up front so a plain executemany can insert: much
        # cheaper than INSERT ... RETURNING for a dump's rows.
        for row, new_id in zip(created, allocate_ids(session, Entry.__table__, len(created)), strict=True):
            row.id = new_id
        bulk_insert(
            session,
            Entry.__table__,
            [
                {
                    "id": r.id,
                    "key": r.key,
                    "kind": r.kind,
                    "title": r.title,
                    "title_norm": r.title_norm,
                    "title_hash": _indexed_title_hash(r.key, r.kind, hashes[r.title_norm]),
                    "authors": r.authors,
                    "published": r.published,
                    "summary": r.summary,
                    "summary_type": r.summary_type,
                    "summary_source_id": source_id,
                    "links": r.links,
                    "arxiv_id": r.arxiv_id,
                    "doi": r.doi,
                    "extra": r.extra,
                    "first_seen_source_id": source_id,
                    "first_seen_at": now,
                    "updated_at": now,
                }
                for r in created
            ],
        )

    changed = [r for r in ordered if r.dirty and not r.created]
    if changed:
        session.execute(
            update(Entry),
            [
                {
                    "id": r.id,
                    "title": r.title,
                    "title_norm": r.title_norm,
                    "title_hash": _indexed_title_hash(r.key, r.kind, title_hash(r.title_norm)),
                    "authors": r.authors,
                    "published": r.published,
                    "summary": r.summary,
                    "summary_type": r.summary_type,
                    "summary_source_id": source_id if r.summary_changed else r.summary_source_id,
                    "links": r.links,
                    "arxiv_id": r.arxiv_id,
                    "doi": r.doi,
                    "extra": r.extra,
                    "updated_at": now,
                }
                for r in changed
            ],
        )

    replaced = [{"eid": r.id, "old": r.replaced_summary} for r in changed if r.replaced_summary is not None]
    if replaced:
        table = Appearance.__table__
        session.connection().execute(
            update(table)
            .where(table.c.entry_id == bindparam("eid"), table.c.summary.is_(None))
            .values(summary=bindparam("old")),
            replaced,
        )
    insert_ignoring_conflicts(
        session,
        Appearance.__table__,
        [
            {
                "entry_id": row.id,
                "source_id": source_id,
                "position": position,
                # NULL: same text as the entry's (now current) summary.
                "summary": None if item.summary == row.summary else item.summary,
            }
            for row, item, position in appearances.values()
        ],
    )
    _attach_source_tags(session, source_id, ordered, parsed.header_tags)
    if rules is not None and len(rules):
        retext = [r for r in ordered if r.created or r.dirty]
        set_rule_tags(
            session,
            {r.id: rules.match(r.title, match_text(r.summary, r.extra)) for r in retext},  # type: ignore[misc]  # ids are set once new rows are inserted
            replace=any(not r.created for r in retext),
        )
    return UpsertCounts(entries=len(ordered), new=len(created), updated=len(changed))


# An ingest that adds this share of what PostgreSQL believes ``entries`` holds
# refreshes the statistics itself (see refresh_statistics).
STATISTICS_GROWTH = 0.1


def refresh_statistics(session: Session, new_entries: int) -> bool:
    """On PostgreSQL, ANALYZE the tables an ingest grows when *new_entries* is at least
    a tenth of the rows the planner believes ``entries`` has (or it never counted
    them); returns whether it did.

    The identity look-ups are planned from those statistics.  Autovacuum refreshes
    them only a minute or more after a tenth of a table changed, so dumps ingested
    back to back (a first import of a long history, a backlog after downtime) were
    planned as sequential scans of the whole table, one per 900 keys, and ingest
    cost grew with the store (bench/README.md, ingest).
    SQLite plans from its indexes alone and needs none of this.
    """
    if new_entries <= 0 or session.get_bind().dialect.name != "postgresql":
        return False
    believed = session.execute(
        text("SELECT reltuples FROM pg_class WHERE oid = CAST(:name AS regclass)"), {"name": Entry.__tablename__}
    ).scalar_one()
    if believed > 0 and new_entries < STATISTICS_GROWTH * believed:  # -1: never analyzed
        return False
    # Only the columns queries select on: statistics of the summaries and JSON
    # columns would cost most of the time and plan nothing.
    entries = ", ".join(
        c.name for c in (Entry.id, Entry.key, Entry.title_hash, Entry.arxiv_id, Entry.doi, Entry.first_seen_at)
    )
    session.execute(text(f"ANALYZE {Entry.__tablename__} ({entries})"))
    session.execute(text(f"ANALYZE {Appearance.__tablename__}"))
    session.execute(text(f"ANALYZE {EntryTag.__tablename__}"))
    return True


def _attach_source_tags(session: Session, source_id: int, rows: list[_Row], header_tags: Sequence[str]) -> None:
    tag_ids = ensure_tags(session, [*header_tags, *(label for row in rows for label in row.tags.values())])
    dialect = session.get_bind().dialect.name
    build = pg_insert if dialect == "postgresql" else sqlite_insert
    for name in {label.casefold() for label in header_tags}:
        # A header tag goes to every entry of the source: one INSERT ... SELECT
        # over its appearances, run inside the database, not 10k Python rows.
        rows_of_source = select(Appearance.entry_id, literal(tag_ids[name]), literal(TagOrigin.HEADER.value)).where(
            Appearance.source_id == source_id
        )
        session.execute(
            build(EntryTag)
            .from_select([EntryTag.entry_id, EntryTag.tag_id, EntryTag.origin], rows_of_source)
            .on_conflict_do_nothing()
        )
    insert_ignoring_conflicts(
        session,
        EntryTag.__table__,
        [
            {"entry_id": row.id, "tag_id": tag_ids[name], "origin": str(origin)}
            for row in rows
            for name, origin in row.tags
        ],
    )


def set_rule_tags(session: Session, tags: dict[int, Iterable[str]], *, replace: bool = True) -> None:
    """Make the rule tags of each entry in *tags* exactly the given names."""
    if replace:
        for part in chunks(list(tags)):
            session.execute(
                delete(EntryTag).where(EntryTag.entry_id.in_(part), EntryTag.origin == TagOrigin.RULE.value)
            )
    tag_ids = ensure_tags(session, {name for names in tags.values() for name in names})
    bulk_insert(
        session,
        EntryTag.__table__,
        [
            {"entry_id": entry_id, "tag_id": tag_ids[name.casefold()], "origin": TagOrigin.RULE.value}
            for entry_id, names in tags.items()
            for name in names
        ],
        ignore_conflicts=True,
    )
