"""Ingest: one parsed source's entries into the store, each entry stored once.

Loads the stored entries the source could name, resolves identity and merges
in memory (``bot.ingest.resolve``), then writes new entries, changed ones,
appearances and tags in a few batched statements.  The caller owns the
transaction; this never commits, renders or plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from bot.choose.tagging import TagRules
from bot.domain import EntryKind, ParsedSource, TagOrigin, match_text
from bot.domain.identity import title_hash
from bot.ingest.resolve import (
    EntryRecord,
    IdentityIndex,
    Resolution,
    indexed_title_hash,
    keyed,
    lookups,
    resolve,
    title_hashes,
)
from bot.store.entries import (
    attach_source_tags,
    entries_matching,
    insert_appearances,
    insert_entries,
    keep_replaced_summaries,
    mark_linked,
    mark_revised,
    new_entry_ids,
    set_rule_tags,
    update_entries,
)
from bot.store.entry_content import CONTENT_FIELDS, content_columns, content_of
from bot.store.library import match_arrivals

# What ingest loads of each stored entry a source may name.
_RECORD_COLUMNS = ("id", "key", "title_norm", "summary_source_id", *CONTENT_FIELDS)


@dataclass(frozen=True, slots=True)
class EntryUpsertCounts:
    entries: int
    new: int
    updated: int


def upsert_source_entries(
    session: Session, source_id: int, parsed: ParsedSource, now: datetime, rules: TagRules | None = None
) -> EntryUpsertCounts:
    """Store every entry of *parsed* once, record its appearance in *source_id*,
    attach header and category tags, (re)compute rule tags of the entries that are
    new or whose text changed, and match the library papers waiting for them."""
    items = keyed(parsed.entries)
    hashes = title_hashes(items)
    index = IdentityIndex()
    for row in entries_matching(session, _RECORD_COLUMNS, **lookups(items, hashes)._asdict()):
        index.add(EntryRecord(row.id, row.key, row.title_norm, content_of(row), row.summary_source_id))
    resolution = resolve(items, index, source_id)
    created, changed = _write_entries(session, source_id, now, resolution, hashes)
    match_arrivals(
        session,
        [
            (_id(r), r.key, r.content.arxiv_id, r.content.doi, r.title_norm)
            for r in resolution.records
            if r.content.kind is EntryKind.PAPER and (r.created or r.dirty)
        ],
    )
    _write_appearances_and_tags(session, source_id, resolution, parsed.header_tags)
    if rules is not None and len(rules):
        _retag(session, rules, [r for r in resolution.records if r.created or r.dirty])
    return EntryUpsertCounts(entries=len(resolution.records), new=created, updated=changed)


def _write_entries(
    session: Session, source_id: int, now: datetime, resolution: Resolution, hashes: dict[str, int]
) -> tuple[int, int]:
    """Insert the new entries and update the changed ones; returns how many of each."""
    created = [r for r in resolution.records if r.created]
    if created:
        for record, new_id in zip(created, new_entry_ids(session, len(created)), strict=True):
            record.id = new_id
        insert_entries(session, [_new_row(r, source_id, now, hashes[r.title_norm]) for r in created])
    changed = [r for r in resolution.records if r.dirty and not r.created]
    update_entries(session, [_changed_row(r, source_id, now) for r in changed])
    keep_replaced_summaries(session, [(_id(r), r.replaced_summary) for r in changed if r.replaced_summary is not None])
    _mark_news(session, changed, now)
    return len(created), len(changed)


def _mark_news(session: Session, changed: list[EntryRecord], now: datetime) -> None:
    """Known papers this source revised (arXiv ``replace``) or gave a new code link."""
    mark_revised(session, [(_id(r), r.revision) for r in changed if r.revision is not None], now)
    mark_linked(session, [_id(r) for r in changed if r.linked], now)


def _retag(session: Session, rules: TagRules, records: list[EntryRecord]) -> None:
    """Rule tags of new entries and of entries whose text this source changed."""
    set_rule_tags(
        session,
        {_id(r): rules.match(r.content.title, match_text(r.content.summary, r.content.extra)) for r in records},
        replace=any(not r.created for r in records),
    )


def _id(record: EntryRecord) -> int:
    if record.id is None:  # ids are allocated before any row naming one is built
        raise AssertionError(f"entry {record.key} has no id yet")
    return record.id


def _write_appearances_and_tags(
    session: Session, source_id: int, resolution: Resolution, header_tags: tuple[str, ...]
) -> None:
    insert_appearances(
        session,
        [
            {
                "entry_id": a.record.id,
                "source_id": source_id,
                "position": a.position,
                # NULL: same text as the entry's (now current) summary.
                "summary": None if a.item.content.summary == a.record.content.summary else a.item.content.summary,
            }
            for a in resolution.appearances
        ],
    )
    entry_tags: list[tuple[int, str, TagOrigin]] = [
        (_id(record), label, origin) for record in resolution.records for (_, origin), label in record.tags.items()
    ]
    attach_source_tags(session, source_id, header_tags, entry_tags)


def _new_row(record: EntryRecord, source_id: int, now: datetime, hashed: int) -> dict[str, Any]:
    return {
        **content_columns(record.content),
        "id": record.id,
        "key": record.key,
        "title_norm": record.title_norm,
        "title_hash": indexed_title_hash(record.key, record.content.kind, hashed),
        "summary_source_id": source_id,
        "first_seen_source_id": source_id,
        "first_seen_at": now,
        "updated_at": now,
        "linked_at": now if record.linked else None,
    }


def _changed_row(record: EntryRecord, source_id: int, now: datetime) -> dict[str, Any]:
    return {
        **content_columns(record.content),
        "id": record.id,
        "title_norm": record.title_norm,
        "title_hash": indexed_title_hash(record.key, record.content.kind, title_hash(record.title_norm)),
        "summary_source_id": source_id if record.summary_changed else record.summary_source_id,
        "updated_at": now,
    }
