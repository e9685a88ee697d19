"""Taste vocabularies and models (``bot.taste``): SQL only.  Arrays go in and out as
bytes (``StoredVocabulary``, ``StoredModel``); ``bot.taste`` makes arrays of them, so
this module never imports it or numpy."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Iterator
from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, insert, select
from sqlalchemy.orm import Session

from bot.domain import StoredModel, StoredVocabulary, match_text
from bot.store.bulk import chunks
from bot.store.row_shapes import RowShape
from bot.store.schema import Entry, SubscriberRow
from bot.store.taste_tables import Feedback, LibraryPaperRow, TasteModel, TasteVocabulary

VOCABULARY = RowShape(StoredVocabulary)
# Its library papers' terms are kept as base64 in JSON: decoded by the reader.
MODEL = RowShape(StoredModel, computed=("library",))


def latest_vocabulary(session: Session) -> StoredVocabulary | None:
    """The newest vocabulary."""
    row = session.scalars(select(TasteVocabulary).order_by(TasteVocabulary.id.desc()).limit(1)).first()
    if row is None:
        return None
    return VOCABULARY.of(row)


def latest_vocabulary_id(session: Session) -> int | None:
    return session.scalar(select(func.max(TasteVocabulary.id)))


def vocabulary_size(session: Session) -> int | None:
    """How many entries the newest vocabulary was fitted on (None: there is none)."""
    return session.scalar(select(TasteVocabulary.entries).order_by(TasteVocabulary.id.desc()).limit(1))


def newest_entry_id(session: Session) -> int:
    return int(session.scalar(select(func.max(Entry.id))) or 0)


def save_vocabulary(session: Session, terms: list[str], idf: bytes, entries: int, now: datetime) -> int:
    """Store a new vocabulary, with an id above every earlier one (a model names the one it
    was trained in), and delete the earlier ones: their models are trained again."""
    new_id = int(session.scalar(select(func.max(TasteVocabulary.id))) or 0) + 1
    session.execute(insert(TasteVocabulary).values(id=new_id, fitted_at=now, entries=entries, terms=terms, idf=idf))
    session.execute(delete(TasteVocabulary).where(TasteVocabulary.id < new_id))
    return new_id


def entry_count(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(Entry)) or 0)


def entry_ids(session: Session) -> list[int]:
    return list(session.scalars(select(Entry.id).order_by(Entry.id)))


def texts_of(session: Session, ids: Iterable[int]) -> dict[int, str]:
    """Each entry's text as the model sees it (title and summary, markup out)."""
    return {i: f"{title}\n{text}" for i, (title, text) in titled_texts_of(session, ids).items()}


def titled_texts_of(session: Session, ids: Iterable[int]) -> dict[int, tuple[str, str]]:
    """Each entry's title, and its summary as the model sees it (markup out)."""
    found: dict[int, tuple[str, str]] = {}
    for part in chunks(sorted(set(ids))):
        rows = session.execute(select(Entry.id, Entry.title, Entry.summary, Entry.extra).where(Entry.id.in_(part)))
        found.update((i, (title, match_text(summary, extra))) for i, title, summary, extra in rows)
    return found


def taste_signals(session: Session, at_least: int) -> dict[int, str]:
    """Per subscriber with at least this many positives (library papers and "more like
    this"), what changes whenever their library or feedback does: counts, newest ids
    and sums of ids of each kind, hashed."""
    library = select(
        LibraryPaperRow.subscriber_id, func.count(), func.max(LibraryPaperRow.id), func.sum(LibraryPaperRow.id)
    ).group_by(LibraryPaperRow.subscriber_id)
    parts: dict[int, list[str]] = {}
    positives: dict[int, int] = {}
    for sid, n, newest, total in session.execute(library):
        parts.setdefault(sid, []).append(f"library {n}:{newest}:{total}")
        positives[sid] = positives.get(sid, 0) + n
    feedback = select(Feedback.subscriber_id, Feedback.verdict, func.count(), func.sum(Feedback.entry_id)).group_by(
        Feedback.subscriber_id, Feedback.verdict
    )
    for sid, verdict, n, total in session.execute(feedback):
        parts.setdefault(sid, []).append(f"{verdict} {n}:{total}")
        if verdict == "more":
            positives[sid] = positives.get(sid, 0) + n
    return {
        sid: hashlib.blake2b(" ".join(sorted(found)).encode(), digest_size=12).hexdigest()
        for sid, found in parts.items()
        if positives.get(sid, 0) >= at_least
    }


def filters_of(session: Session, subscriber_ids: Iterable[int]) -> dict[int, str]:
    """Each subscriber's filter (its interests decide which models they have)."""
    found: dict[int, str] = {}
    for part in chunks(sorted(set(subscriber_ids))):
        rows = session.execute(select(SubscriberRow.id, SubscriberRow.filter).where(SubscriberRow.id.in_(part)))
        found.update((sid, text) for sid, text in rows)
    return found


def feedback_entries(session: Session, subscriber_id: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(entry id, interest it was shown under) of the entries the subscriber asked more
    of, and of those they asked less of."""
    more: list[tuple[int, str]] = []
    less: list[tuple[int, str]] = []
    query = select(Feedback.entry_id, Feedback.verdict, Feedback.section).where(Feedback.subscriber_id == subscriber_id)
    for entry_id, verdict, section in session.execute(query.order_by(Feedback.at, Feedback.entry_id)):
        (more if verdict == "more" else less).append((entry_id, section))
    return more, less


def library_rows(session: Session, subscriber_id: int) -> list[tuple[str, str, str, int | None]]:
    """(key, title, abstract, entry id) of each library paper, oldest first."""
    query = (
        select(LibraryPaperRow.key, LibraryPaperRow.title, LibraryPaperRow.abstract, LibraryPaperRow.entry_id)
        .where(LibraryPaperRow.subscriber_id == subscriber_id)
        .order_by(LibraryPaperRow.id)
    )
    return [(k, t, a, e) for k, t, a, e in session.execute(query)]


def model_signals(session: Session) -> dict[int, str]:
    """What each subscriber's models were trained from (they are trained together)."""
    query = select(TasteModel.subscriber_id, TasteModel.signals).where(TasteModel.section == "")
    return {sid: signals for sid, signals in session.execute(query)}


def save_models(
    session: Session, subscriber_id: int, models: dict[str, StoredModel], signals: str, now: datetime
) -> None:
    """Replace the subscriber's models: by section, '' for the model of all they keep and rate."""
    session.execute(delete(TasteModel).where(TasteModel.subscriber_id == subscriber_id))
    for section, model in models.items():
        session.execute(
            insert(TasteModel).values(
                subscriber_id=subscriber_id,
                section=section,
                vocabulary_id=model.vocabulary_id,
                signals=signals,
                trained_at=now,
                intercept=model.intercept,
                indices=model.indices,
                weights=model.weights,
                library=[[title, _b64(i), _b64(v)] for title, i, v in model.library],
            )
        )


def delete_models(session: Session, subscriber_ids: Iterable[int]) -> int:
    gone = sorted(set(subscriber_ids))
    for part in chunks(gone):
        session.execute(delete(TasteModel).where(TasteModel.subscriber_id.in_(part)))
    return len(gone)


def models_of(session: Session, subscriber_ids: Iterable[int], vocabulary_id: int) -> dict[int, StoredModel]:
    """The model of all each of these subscribers keeps and rates, trained in
    *vocabulary_id* (others are stale)."""
    return {sid: model for (sid, _), model in _models(session, subscriber_ids, vocabulary_id, TasteModel.section == "")}


def interest_models_of(
    session: Session, subscriber_ids: Iterable[int], vocabulary_id: int
) -> dict[int, dict[str, StoredModel]]:
    """The models of these subscribers' interests that have one, by interest name."""
    found: dict[int, dict[str, StoredModel]] = {}
    for (sid, section), model in _models(session, subscriber_ids, vocabulary_id, TasteModel.section != ""):
        found.setdefault(sid, {})[section] = model
    return found


def _models(
    session: Session, subscriber_ids: Iterable[int], vocabulary_id: int, which: ColumnElement[bool]
) -> Iterator[tuple[tuple[int, str], StoredModel]]:
    for part in chunks(sorted(set(subscriber_ids))):
        query = select(TasteModel).where(
            TasteModel.subscriber_id.in_(part), TasteModel.vocabulary_id == vocabulary_id, which
        )
        for row in session.scalars(query):
            yield (
                (row.subscriber_id, row.section),
                MODEL.of(row, library=tuple((t, base64.b64decode(i), base64.b64decode(v)) for t, i, v in row.library)),
            )


def modelled_interests(session: Session, subscriber_id: int) -> tuple[str, ...]:
    """The names of the subscriber's interests that have a model of their own."""
    query = select(TasteModel.section).where(TasteModel.subscriber_id == subscriber_id, TasteModel.section != "")
    return tuple(session.scalars(query.order_by(TasteModel.section)))


def any_models(session: Session) -> bool:
    return session.scalar(select(TasteModel.subscriber_id).limit(1)) is not None


def _b64(data: bytes) -> str:  # the bytes of a library paper's terms, in a JSON column
    return base64.b64encode(data).decode("ascii")


def taste_counts(session: Session, subscriber_id: int) -> tuple[int, int, int, bool]:
    """(library papers, "more like this", "less like this", whether a model ranks them)."""
    papers = session.scalar(
        select(func.count()).select_from(LibraryPaperRow).where(LibraryPaperRow.subscriber_id == subscriber_id)
    )
    verdicts = dict(
        session.execute(
            select(Feedback.verdict, func.count())
            .where(Feedback.subscriber_id == subscriber_id)
            .group_by(Feedback.verdict)
        ).all()
    )
    model = session.scalar(
        select(TasteModel.subscriber_id).where(TasteModel.subscriber_id == subscriber_id, TasteModel.section == "")
    )
    return int(papers or 0), int(verdicts.get("more", 0)), int(verdicts.get("less", 0)), model is not None
