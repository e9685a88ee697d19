"""Store: reading entries back (lists, one entry with its tags and appearances, tag
counts, texts for re-tagging).  SQL only; never writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import Row, func, or_, select
from sqlalchemy.orm import Session

from bot.domain import EntryNews, EntryView, match_text
from bot.store.bulk import among, chunks
from bot.store.entry_content import content_of
from bot.store.row_shapes import RowShape
from bot.store.schema import AppearanceRow, Entry, EntryTag, Source, TagRow

# Rows, not ORM objects: a planning pass reads thousands and keeps none of them.
_ENTRIES = Entry.__table__


@dataclass
class _EntryTags:
    labels: list[str] = field(default_factory=list)  # distinct, by name
    origins: dict[str, set[str]] = field(default_factory=dict)  # case-folded name -> origins


def _tags_by_entry(session: Session, entry_ids: Sequence[int]) -> dict[int, _EntryTags]:
    tags: dict[int, _EntryTags] = {}
    for part in chunks(list(entry_ids)):
        rows = session.execute(
            select(EntryTag.entry_id, TagRow.name, TagRow.label, EntryTag.origin)
            .join(TagRow, TagRow.id == EntryTag.tag_id)
            .where(among(session, EntryTag.entry_id, part))
            .order_by(EntryTag.entry_id, TagRow.name)
        )
        for entry_id, name, label, origin in rows:
            found = tags.setdefault(entry_id, _EntryTags())
            if name not in found.origins:
                found.labels.append(label)
            found.origins.setdefault(name, set()).add(origin)
    return tags


ENTRY = RowShape(EntryView, computed=("content", "tags", "tag_origins"))


def _view(entry: Entry | Row[Any], tags: _EntryTags | None) -> EntryView:
    tags = tags or _EntryTags()
    return ENTRY.of(
        entry,
        content=content_of(entry),
        tags=tuple(tags.labels),
        tag_origins={name: frozenset(o) for name, o in tags.origins.items()},
    )


def entries_first_seen_between(session: Session, start: datetime | None, end: datetime) -> list[EntryView]:
    """Entries first seen in [start, end] (start None: from the beginning), with tag origins."""
    query = select(_ENTRIES).where(Entry.first_seen_at <= end)
    if start is not None:
        query = query.where(Entry.first_seen_at >= start)
    entries = list(session.execute(query.order_by(Entry.id)))
    tags = _tags_by_entry(session, [e.id for e in entries])
    return [_view(e, tags.get(e.id)) for e in entries]


def entries_by_ids(session: Session, entry_ids: Sequence[int]) -> list[EntryView]:
    """The stored entries of *entry_ids*, with tag origins, in id order (missing ids left out)."""
    entries: list[Row[Any]] = []
    for part in chunks(sorted(set(entry_ids))):
        entries += session.execute(select(_ENTRIES).where(among(session, Entry.id, part)))
    entries.sort(key=lambda e: e.id)
    tags = _tags_by_entry(session, [e.id for e in entries])
    return [_view(e, tags.get(e.id)) for e in entries]


def entries_seen_or_touched_since(session: Session, since: datetime, end: datetime) -> list[int]:
    """Ids of the entries first seen in [since, end], and of the entries any source
    ingested since *since* listed (it may have changed their text or tags)."""
    first_seen = select(Entry.id).where(Entry.first_seen_at >= since, Entry.first_seen_at <= end)
    touched = (
        select(AppearanceRow.entry_id)
        .join(Source, Source.id == AppearanceRow.source_id)
        .where(Source.ingested_at >= since)
    )
    return sorted(set(session.scalars(first_seen)) | set(session.scalars(touched)))


def list_entries(
    session: Session, *, tag: str | None = None, since: date | datetime | None = None, limit: int | None = None
) -> list[EntryView]:
    """Entries newest first; *tag* matches any origin, case-insensitively;
    *since* compares with the moment the store first saw the entry."""
    query = select(Entry)
    if tag is not None:
        query = query.where(
            Entry.id.in_(
                select(EntryTag.entry_id)
                .join(TagRow, TagRow.id == EntryTag.tag_id)
                .where(TagRow.name == tag.casefold())
            )
        )
    if since is not None:
        if not isinstance(since, datetime):
            from datetime import UTC, time

            since = datetime.combine(since, time.min, tzinfo=UTC)
        query = query.where(Entry.first_seen_at >= since)
    query = query.order_by(Entry.first_seen_at.desc(), Entry.id.desc())
    if limit is not None:
        query = query.limit(limit)
    entries = list(session.scalars(query))
    tags = _tags_by_entry(session, [e.id for e in entries])
    return [_view(e, tags.get(e.id)) for e in entries]


def find_entry(session: Session, ref: str) -> EntryView | None:
    """An entry by key, arXiv id, DOI or numeric id."""
    from bot.domain.identity import arxiv_id_in, doi_in

    ref = ref.strip()
    conditions = [Entry.key == ref, Entry.key == ref.lower()]
    if ref.isascii() and ref.isdigit() and int(ref) < 2**63:  # ids are 64-bit: a longer number names none
        conditions.append(Entry.id == int(ref))
    if arxiv := arxiv_id_in(ref):
        conditions.append(Entry.arxiv_id == arxiv)
    if doi := doi_in(ref):
        conditions.append(Entry.doi == doi)
    entry = session.scalars(select(Entry).where(or_(*conditions)).limit(1)).first()
    if entry is None:
        return None
    return _view(entry, _tags_by_entry(session, [entry.id]).get(entry.id))


@dataclass(frozen=True, slots=True)
class AppearanceView:
    source_id: int
    path: str
    position: int
    summary: str
    ingested_at: datetime


APPEARANCE = RowShape(AppearanceView)


def appearances_of(session: Session, entry_id: int) -> list[AppearanceView]:
    rows = session.execute(
        select(
            AppearanceRow.source_id,
            Source.path,
            AppearanceRow.position,
            func.coalesce(AppearanceRow.summary, Entry.summary).label("summary"),
            Source.ingested_at,
        )
        .join(Source, Source.id == AppearanceRow.source_id)
        .join(Entry, Entry.id == AppearanceRow.entry_id)
        .where(AppearanceRow.entry_id == entry_id)
        .order_by(Source.ingested_at, Source.id)
    )
    return [APPEARANCE.of(row) for row in rows]


def tag_origins_of(session: Session, entry_id: int) -> list[tuple[str, str]]:
    rows = session.execute(
        select(TagRow.label, EntryTag.origin)
        .join(TagRow, TagRow.id == EntryTag.tag_id)
        .where(EntryTag.entry_id == entry_id)
        .order_by(TagRow.name, EntryTag.origin)
    )
    return [(label, origin) for label, origin in rows]


def count_entries(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Entry)) or 0


def tag_names(session: Session) -> set[str]:
    """Every tag label the store knows, case-folded."""
    return {label.casefold() for label in session.scalars(select(TagRow.label))}


def tag_counts(session: Session) -> list[tuple[str, int, dict[str, int]]]:
    """(label, distinct entries, entries per origin) for every tag, most used first."""
    per_origin: dict[int, dict[str, int]] = {}
    for tag_id, origin, count in session.execute(
        select(EntryTag.tag_id, EntryTag.origin, func.count()).group_by(EntryTag.tag_id, EntryTag.origin)
    ):
        per_origin.setdefault(tag_id, {})[origin] = count
    totals = dict(
        session.execute(
            select(EntryTag.tag_id, func.count(func.distinct(EntryTag.entry_id))).group_by(EntryTag.tag_id)
        ).all()
    )
    rows = [(t.label, totals.get(t.id, 0), per_origin.get(t.id, {})) for t in session.scalars(select(TagRow))]
    return sorted(rows, key=lambda r: (-r[1], r[0].casefold()))


def entry_texts(session: Session, *, after_id: int = 0, limit: int = 5000) -> list[tuple[int, str, str]]:
    """(id, title, match text) of entries with id > *after_id*, in id order: for re-tagging in batches."""
    rows = session.execute(
        select(Entry.id, Entry.title, Entry.summary, Entry.extra)
        .where(Entry.id > after_id)
        .order_by(Entry.id)
        .limit(limit)
    )
    return [(i, title, match_text(summary, extra)) for i, title, summary, extra in rows]


def latest_entry_at(session: Session) -> datetime | None:
    """When the newest entry was first seen (None: the store has none)."""
    return session.scalar(select(func.max(Entry.first_seen_at)))


def entries_with_news(session: Session, since: datetime) -> dict[int, EntryNews]:
    """The papers revised (arXiv ``replace``) or given a code or model link after
    *since*: each through its own partial index, never a scan of the entries."""
    columns = (Entry.id, Entry.title, Entry.arxiv_id, Entry.revised_at, Entry.revision_note, Entry.linked_at)
    found: dict[int, EntryNews] = {}
    for moment in (Entry.revised_at, Entry.linked_at):
        for entry_id, title, arxiv_id, revised_at, note, linked_at, links in session.execute(
            select(*columns, Entry.links).where(moment > since)
        ):
            found[entry_id] = EntryNews(entry_id, title, arxiv_id, revised_at, note, linked_at, tuple(links or ()))
    return found


def keys_of(session: Session, entry_ids: Sequence[int]) -> dict[int, str]:
    """The key of each stored entry of *entry_ids* (missing ids left out)."""
    found: dict[int, str] = {}
    for part in chunks(sorted(set(entry_ids))):
        for entry_id, key in session.execute(select(Entry.id, Entry.key).where(among(session, Entry.id, part))):
            found[entry_id] = key
    return found
