"""Store: writing entries, appearances and tags, and loading identity candidates.

Candidates come from a handful of indexed ``IN (...)`` look-ups (arXiv id,
DOI, key, title hash) and rows are written with executemany, so ingesting N
entries costs O(N) whatever the store already holds.  SQL only: which entry
is which, and what a source may change, is ``bot.ingest.resolve``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, delete, literal, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from bot.domain import TagOrigin
from bot.store.bulk import allocate_ids, among, bulk_insert, chunks, insert_ignoring_conflicts
from bot.store.schema import AppearanceRow, Entry, EntryTag, TagRow


def entries_matching(
    session: Session,
    names: Sequence[str],
    *,
    arxiv_ids: Sequence[str],
    dois: Sequence[str],
    keys: Sequence[str],
    title_hashes: Sequence[int],
) -> Iterator[Row[Any]]:
    """The columns *names* (``id`` among them) of every entry with one of the given
    arXiv ids, DOIs, keys or title hashes, each entry once."""
    columns = [getattr(Entry, name) for name in names]
    seen: set[int] = set()
    for column, values in (
        (Entry.arxiv_id, arxiv_ids),
        (Entry.doi, dois),
        (Entry.key, keys),
        (Entry.title_hash, title_hashes),
    ):
        for part in chunks(values):
            for rec in session.execute(select(*columns).where(among(session, column, part))):
                if rec.id not in seen:
                    seen.add(rec.id)
                    yield rec


def insert_entries(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert new entries whose ids were allocated with ``new_entry_ids``."""
    bulk_insert(session, Entry.__table__, rows)


def new_entry_ids(session: Session, count: int) -> Sequence[int]:
    # Ids are allocated up front so a plain executemany can insert: much
    # cheaper than INSERT ... RETURNING for a dump's rows.
    return allocate_ids(session, Entry.__table__, count) if count else []


def update_entries(session: Session, rows: list[dict[str, Any]]) -> None:
    """Update stored entries by primary key (every row has ``id`` and the same columns)."""
    if rows:
        session.execute(update(Entry), rows)


def keep_replaced_summaries(session: Session, replaced: list[tuple[int, str]]) -> None:
    """Appearances that stored NULL (meaning "the entry's summary") get the summary
    the entry had until now, before the entry's summary changes under them."""
    if not replaced:
        return
    table = AppearanceRow.__table__
    session.connection().execute(
        update(table)
        .where(table.c.entry_id == bindparam("eid"), table.c.summary.is_(None))
        .values(summary=bindparam("old")),
        [{"eid": entry_id, "old": old} for entry_id, old in replaced],
    )


def mark_revised(session: Session, revised: list[tuple[int, str]], now: datetime) -> None:
    """Entries a revision changed (``resolve.revision_note``): when, and what."""
    if not revised:
        return
    table = Entry.__table__
    session.connection().execute(
        update(table).where(table.c.id == bindparam("eid")).values(revised_at=now, revision_note=bindparam("note")),
        [{"eid": entry_id, "note": note} for entry_id, note in revised],
    )


def mark_linked(session: Session, entry_ids: list[int], now: datetime) -> None:
    """Papers a source gave a code or model link they had not had (``resolve.gained_code``)."""
    if not entry_ids:
        return
    table = Entry.__table__
    session.connection().execute(
        update(table).where(table.c.id == bindparam("eid")).values(linked_at=now),
        [{"eid": entry_id} for entry_id in entry_ids],
    )


def insert_appearances(session: Session, rows: list[dict[str, Any]]) -> None:
    insert_ignoring_conflicts(session, AppearanceRow.__table__, rows)


def ensure_tags(session: Session, labels: Iterable[str]) -> dict[str, int]:
    """TagRow ids by case-folded name, creating the missing tags."""
    wanted: dict[str, str] = {}
    for label in labels:
        wanted.setdefault(label.casefold(), label)
    ids: dict[str, int] = {}
    names = sorted(wanted)
    for part in chunks(names):
        ids.update(session.execute(select(TagRow.name, TagRow.id).where(TagRow.name.in_(part))).all())
    missing = [{"name": n, "label": wanted[n]} for n in names if n not in ids]
    if missing:
        insert_ignoring_conflicts(session, TagRow.__table__, missing)
        for part in chunks([m["name"] for m in missing]):
            ids.update(session.execute(select(TagRow.name, TagRow.id).where(TagRow.name.in_(part))).all())
    return ids


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
    session.execute(text(f"ANALYZE {AppearanceRow.__tablename__}"))
    session.execute(text(f"ANALYZE {EntryTag.__tablename__}"))
    return True


def attach_source_tags(
    session: Session, source_id: int, header_tags: Sequence[str], entry_tags: Sequence[tuple[int, str, TagOrigin]]
) -> None:
    """TagRow every entry of the source with *header_tags*, and each entry with its own
    ``(entry id, label, origin)`` tags, creating the tags that are new."""
    tag_ids = ensure_tags(session, [*header_tags, *(label for _, label, _ in entry_tags)])
    dialect = session.get_bind().dialect.name
    build = pg_insert if dialect == "postgresql" else sqlite_insert
    for name in {label.casefold() for label in header_tags}:
        # A header tag goes to every entry of the source: one INSERT ... SELECT
        # over its appearances, run inside the database, not 10k Python rows.
        rows_of_source = select(AppearanceRow.entry_id, literal(tag_ids[name]), literal(TagOrigin.HEADER.value)).where(
            AppearanceRow.source_id == source_id
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
            {"entry_id": entry_id, "tag_id": tag_ids[label.casefold()], "origin": str(origin)}
            for entry_id, label, origin in entry_tags
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
