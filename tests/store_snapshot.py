"""A comparable picture of everything the store holds about entries (ids excluded)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.store.schema import Appearance, Entry, EntryTag, Source, Tag


def snapshot(factory: sessionmaker[Session]) -> dict[str, object]:
    with factory() as s:
        entries = sorted(
            (e.key, e.kind, e.title, tuple(e.authors), e.published, e.summary, tuple(e.links), e.arxiv_id, e.doi)
            for e in s.scalars(select(Entry))
        )
        appearances = sorted(
            s.execute(
                select(Entry.key, Source.sha256, Appearance.position, func.coalesce(Appearance.summary, Entry.summary))
                .join(Entry, Entry.id == Appearance.entry_id)
                .join(Source, Source.id == Appearance.source_id)
            ).all()
        )
        tags = sorted(
            s.execute(
                select(Entry.key, Tag.name, EntryTag.origin)
                .join(Entry, Entry.id == EntryTag.entry_id)
                .join(Tag, Tag.id == EntryTag.tag_id)
            ).all()
        )
        ingested = sorted(
            s.execute(
                select(Source.sha256, Source.entries_count, Source.new_count).where(Source.status == "ingested")
            ).all()
        )
    return {"entries": entries, "appearances": appearances, "tags": tags, "ingested": ingested}
