"""The store's part of the embeddings: one vector per paper and model, keyed as entries
and library papers are, the papers still without one, and each reader's model on them.
SQL only: never asks a model, never trains or scores (``bot.llm`` and ``bot.taste``
do).  Rows are written in key order, upserted: the daemon and ``digestbot llm embed``
may write the same ones at once without a deadlock or a duplicate key."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from bot.store.bulk import among, chunks
from bot.store.llm_tables import EmbeddingModelRow, EmbeddingRow
from bot.store.schema import Entry
from bot.store.taste_tables import Feedback, LibraryPaperRow

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
        [{"key": key, "model": model, "vector": vector, "embedded_at": now} for key, vector in sorted(vectors)],
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


def models_trained(session: Session, model: str) -> dict[int, tuple[str, datetime]]:
    """Each reader's model on the embeddings: what it was trained from and when (a model
    on another embedding model's vectors reads as trained from nothing)."""
    query = select(
        EmbeddingModelRow.subscriber_id, EmbeddingModelRow.model, EmbeddingModelRow.signal, EmbeddingModelRow.trained_at
    )
    return {sid: (signal if made_by == model else "", at) for sid, made_by, signal, at in session.execute(query)}


def newest_positive_embedded(session: Session, model: str) -> dict[int, datetime]:
    """Per reader, when the newest vector of one of their papers (library, "more like
    this") was stored: a model trained before it has not learned that paper."""
    found: dict[int, datetime] = {}
    embedded = (EmbeddingRow.model == model) & (EmbeddingRow.key == LibraryPaperRow.key)
    library = select(LibraryPaperRow.subscriber_id, func.max(EmbeddingRow.embedded_at)).join(EmbeddingRow, embedded)
    rated = (
        select(Feedback.subscriber_id, func.max(EmbeddingRow.embedded_at))
        .join(Entry, Entry.id == Feedback.entry_id)
        .join(EmbeddingRow, (EmbeddingRow.key == Entry.key) & (EmbeddingRow.model == model))
        .where(Feedback.verdict == "more")
    )
    for query in (library.group_by(LibraryPaperRow.subscriber_id), rated.group_by(Feedback.subscriber_id)):
        for sid, at in session.execute(query):
            found[sid] = max(found.get(sid, at), at)
    return found


def examples_of(session: Session, subscriber_ids: Sequence[int]) -> dict[int, tuple[set[str], set[str]]]:
    """Per reader, the keys of their papers (library and "more like this") and of what
    they marked "less like this"."""
    found: dict[int, tuple[set[str], set[str]]] = {sid: (set(), set()) for sid in subscriber_ids}
    for part in chunks(list(subscriber_ids)):
        for sid, key in session.execute(
            select(LibraryPaperRow.subscriber_id, LibraryPaperRow.key).where(
                among(session, LibraryPaperRow.subscriber_id, part)
            )
        ):
            found[sid][0].add(key)
        for sid, key, verdict in session.execute(
            select(Feedback.subscriber_id, Entry.key, Feedback.verdict)
            .join(Entry, Entry.id == Feedback.entry_id)
            .where(among(session, Feedback.subscriber_id, part))
        ):
            found[sid][0 if verdict == "more" else 1].add(key)
    return found


def save_models(session: Session, models: Sequence[dict[str, object]]) -> None:
    """Replace the readers' models by *models* (rows of ``embedding_models``)."""
    if not models:
        return
    build = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    statement = build(EmbeddingModelRow)
    replaced = ("model", "signal", "weights", "intercept", "papers", "trained_at")
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[EmbeddingModelRow.subscriber_id],
            set_={name: statement.excluded[name] for name in replaced},
        ),
        sorted(models, key=lambda row: int(str(row["subscriber_id"]))),
    )


def forget_models(session: Session, subscriber_ids: Sequence[int]) -> int:
    """Delete the models of *subscriber_ids*; how many there were."""
    gone = 0
    for part in chunks(list(subscriber_ids)):
        result = session.execute(delete(EmbeddingModelRow).where(among(session, EmbeddingModelRow.subscriber_id, part)))
        gone += int(getattr(result, "rowcount", 0) or 0)
    return gone


def models_of(session: Session, subscriber_ids: Sequence[int], model: str) -> dict[int, tuple[bytes, float]]:
    """The weights and intercept of each reader's model on *model*'s vectors."""
    found: dict[int, tuple[bytes, float]] = {}
    for part in chunks(sorted(set(subscriber_ids))):
        rows = session.execute(
            select(EmbeddingModelRow.subscriber_id, EmbeddingModelRow.weights, EmbeddingModelRow.intercept).where(
                among(session, EmbeddingModelRow.subscriber_id, part), EmbeddingModelRow.model == model
            )
        )
        for sid, weights, intercept in rows:
            if weights:  # none: the reader's model could not be fitted
                found[sid] = (bytes(weights), float(intercept))
    return found
