"""The store's part of the embeddings: one vector per paper and model, keyed as entries
and library papers are, and the papers still without one.  SQL only: never asks a
model, never trains or scores (``bot.llm`` and ``bot.taste.embedded`` do)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from bot.store.bulk import among, chunks
from bot.store.llm_tables import EmbeddingRow
from bot.store.schema import Entry
from bot.store.taste_tables import LibraryPaperRow

PaperText = tuple[str, str, str]  # (key, title, abstract)


def save_embeddings(session: Session, vectors: Sequence[tuple[str, bytes]], model: str, now: datetime) -> None:
    """Keep each (key, packed vector) as *model*'s, replacing another model's."""
    if not vectors:
        return
    build = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    statement = build(EmbeddingRow)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[EmbeddingRow.key],
            set_={
                "model": statement.excluded.model,
                "vector": statement.excluded.vector,
                "embedded_at": statement.excluded.embedded_at,
            },
        ),
        [{"key": key, "model": model, "vector": vector, "embedded_at": now} for key, vector in vectors],
    )


def embeddings_of(session: Session, keys: Sequence[str], model: str) -> dict[str, bytes]:
    """The packed vectors *model* made of *keys*; a key without one is absent."""
    found: dict[str, bytes] = {}
    for part in chunks(sorted(set(keys))):
        rows = session.execute(
            select(EmbeddingRow.key, EmbeddingRow.vector).where(
                among(session, EmbeddingRow.key, part), EmbeddingRow.model == model
            )
        )
        found.update((key, bytes(vector)) for key, vector in rows)
    return found


def entries_to_embed(session: Session, since: datetime, model: str, most: int) -> list[PaperText]:
    """Entries first seen since *since* that *model* has not embedded, newest first."""
    query = (
        select(Entry.key, Entry.title, Entry.summary)
        .outerjoin(EmbeddingRow, (EmbeddingRow.key == Entry.key) & (EmbeddingRow.model == model))
        .where(Entry.first_seen_at >= since, EmbeddingRow.key.is_(None))
        .order_by(Entry.id.desc())
        .limit(most)
    )
    return [(key, title, summary or "") for key, title, summary in session.execute(query)]


def library_to_embed(session: Session, model: str, most: int) -> list[PaperText]:
    """Library papers *model* has not embedded, one per key, newest first (a paper that is
    a stored entry with its entry's title and abstract where it has none of its own)."""
    newest = (
        select(LibraryPaperRow.key, func.max(LibraryPaperRow.id).label("id"))
        .outerjoin(EmbeddingRow, (EmbeddingRow.key == LibraryPaperRow.key) & (EmbeddingRow.model == model))
        .where(EmbeddingRow.key.is_(None))
        .group_by(LibraryPaperRow.key)
        .subquery()
    )
    query = (
        select(
            LibraryPaperRow.key,
            func.coalesce(func.nullif(LibraryPaperRow.title, ""), Entry.title, ""),
            func.coalesce(func.nullif(LibraryPaperRow.abstract, ""), Entry.summary, ""),
        )
        .join(newest, newest.c.id == LibraryPaperRow.id)
        .outerjoin(Entry, Entry.id == LibraryPaperRow.entry_id)
        .order_by(LibraryPaperRow.id.desc())
        .limit(most)
    )
    return [(key, title, abstract) for key, title, abstract in session.execute(query) if title or abstract]


def recent_embedded_keys(session: Session, since: datetime, model: str, most: int) -> list[str]:
    """Keys of entries first seen since *since* that *model* embedded: the store's sample
    a reader's model is trained against."""
    query = (
        select(Entry.key)
        .join(EmbeddingRow, (EmbeddingRow.key == Entry.key) & (EmbeddingRow.model == model))
        .where(Entry.first_seen_at >= since)
        .order_by(Entry.id.desc())
        .limit(most)
    )
    return list(session.scalars(query))
