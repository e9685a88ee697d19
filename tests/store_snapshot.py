"""A comparable picture of everything the store holds about entries (ids excluded)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.store.schema import AppearanceRow, Entry, EntryTag, Source, TagRow


def snapshot(factory: sessionmaker[Session]) -> dict[str, object]:
    with factory() as s:
        entries = sorted(
            (e.key, e.kind, e.title, tuple(e.authors), e.published, e.summary, tuple(e.links), e.arxiv_id, e.doi)
            for e in s.scalars(select(Entry))
        )
        appearances = sorted(
            s.execute(
                select(
                    Entry.key,
                    Source.sha256,
                    AppearanceRow.position,
                    func.coalesce(AppearanceRow.summary, Entry.summary),
                )
                .join(Entry, Entry.id == AppearanceRow.entry_id)
                .join(Source, Source.id == AppearanceRow.source_id)
            ).all()
        )
        tags = sorted(
            s.execute(
                select(Entry.key, TagRow.name, EntryTag.origin)
                .join(Entry, Entry.id == EntryTag.entry_id)
                .join(TagRow, TagRow.id == EntryTag.tag_id)
            ).all()
        )
        ingested = sorted(
            s.execute(
                select(Source.sha256, Source.entries_count, Source.new_count).where(Source.status == "ingested")
            ).all()
        )
    return {"entries": entries, "appearances": appearances, "tags": tags, "ingested": ingested}
