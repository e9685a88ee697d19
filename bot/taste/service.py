"""Taste stage, the service: a subscriber's library read from a file, listed and
changed; the vocabulary and the models kept up to date (``refresh_models``, called by
every planning pass).  Composes ``library``, ``features`` and ``model`` (pure) with
``bot.store.library`` and ``bot.store.taste`` (SQL); never renders or sends."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from bot.domain import LibraryPaper
from bot.store.engine import transaction
from bot.store.library import add_papers, library_of, remove_papers
from bot.store.taste import (
    delete_models,
    entry_count,
    entry_ids,
    latest_vocabulary,
    latest_vocabulary_id,
    library_rows,
    library_signals,
    model_signals,
    newest_entry_id,
    save_model,
    save_vocabulary,
    texts_of,
    vocabulary_size,
)
from bot.taste.library import read_library

log = logging.getLogger(__name__)
MIN_POSITIVES = 2  # fewer papers teach nothing a filter does not already say (bot.taste.model)


@dataclass(frozen=True, slots=True)
class LibraryImport:
    added: list[LibraryPaper]
    already: int  # papers the library held before
    problems: list[str]  # one line per record that could not be read
    format: str


def import_library(factory: sessionmaker[Session], subscriber_id: int, data: bytes, now: datetime) -> LibraryImport:
    """Add what an export holds to the subscriber's library (``LibraryFileError`` when
    the file cannot be read at all; bad records are listed, the rest is added)."""
    read = read_library(data)
    with transaction(factory) as session:
        added = add_papers(session, subscriber_id, read.papers, now)
    return LibraryImport(added, len(read.papers) - len(added), read.problems, read.format)


def library(factory: sessionmaker[Session], subscriber_id: int) -> list[LibraryPaper]:
    with factory() as session:
        return library_of(session, subscriber_id)


def remove_from_library(factory: sessionmaker[Session], subscriber_id: int, keys: list[str]) -> int:
    with transaction(factory) as session:
        return remove_papers(session, subscriber_id, keys)


@dataclass
class ModelsReport:
    vocabulary_fitted: bool = False
    trained: int = 0
    removed: int = 0
    seconds: float = 0.0


# The vocabulary is fitted again when the store has grown by a quarter since.
REFIT_GROWTH = 1.25
MAX_FIT_ENTRIES = 50_000  # the newest entries, when the store holds more (a fit holds their counts)
SAMPLE = 400  # store entries a model learns "not this reader's" from


def refresh_models(factory: sessionmaker[Session], now: datetime, only: list[int] | None = None) -> ModelsReport:
    """Fit the vocabulary again when the store has grown, and train the model of each
    subscriber whose library (or the vocabulary) changed since it was trained.  Cheap
    when nothing changed: a few queries, and nothing numerical is imported."""
    import time

    started = time.perf_counter()
    report = ModelsReport()
    with factory() as session:
        signals = library_signals(session, MIN_POSITIVES)
        trained = model_signals(session)
        count, fitted = (entry_count(session), vocabulary_size(session)) if signals else (0, None)
    gone = [sid for sid in trained if sid not in signals]  # their library went, or went below the minimum
    if gone:
        with transaction(factory) as session:
            report.removed = delete_models(session, gone)
    if not signals or not count:
        return report
    if fitted is None or count >= fitted * REFIT_GROWTH:
        _fit_vocabulary(factory, count, now)
        report.vocabulary_fitted = True
    with factory() as session:
        vocabulary_id = latest_vocabulary_id(session)
    wanted = {sid: f"{vocabulary_id}:{sig}" for sid, sig in signals.items() if only is None or sid in only}
    stale = [sid for sid, sig in wanted.items() if trained.get(sid) != sig]
    if stale:
        report.trained = _train(factory, stale, wanted, now)
        log.info("trained %d taste models in %.1f s", report.trained, time.perf_counter() - started)
    report.seconds = time.perf_counter() - started
    return report


def _fit_vocabulary(factory: sessionmaker[Session], count: int, now: datetime) -> None:
    from bot.store.entry_reads import entry_texts
    from bot.taste.features import fit_vocabulary, text_of

    texts: list[str] = []
    after = 0
    with factory() as session:
        after = max(0, newest_entry_id(session) - MAX_FIT_ENTRIES) if count > MAX_FIT_ENTRIES else 0
        while rows := entry_texts(session, after_id=after, limit=5000):
            texts.extend(text_of(title, text) for _, title, text in rows)
            after = rows[-1][0]
    terms, idf = fit_vocabulary(texts[-MAX_FIT_ENTRIES:])
    with transaction(factory) as session:
        save_vocabulary(session, terms, idf, count, now)


def _train(factory: sessionmaker[Session], stale: list[int], wanted: dict[int, str], now: datetime) -> int:
    import random

    from bot.taste.model import train

    with factory() as session:
        found = latest_vocabulary(session)
        ids = entry_ids(session)
    if found is None:
        return 0
    vocabulary = found[0]
    for subscriber_id in stale:
        with factory() as session:
            papers = library_rows(session, subscriber_id)
            mine = {entry_id for *_, entry_id in papers if entry_id is not None}
            drawn = random.Random(subscriber_id).sample(ids, min(len(ids), SAMPLE + len(mine)))
            pool = [i for i in drawn if i not in mine][:SAMPLE]
            texts = texts_of(session, [*pool, *mine])
        positives = [_positive(title, abstract, texts.get(entry_id or 0)) for _, title, abstract, entry_id in papers]
        model = train(vocabulary, positives, [], [texts[i] for i in pool if i in texts])
        try:
            with transaction(factory) as session:
                save_model(session, subscriber_id, model, wanted[subscriber_id], now)
        except IntegrityError:  # another process (the scheduler, `library add`) saved it meanwhile
            log.info("model of subscriber %d saved by another process", subscriber_id)
    return len(stale)


def _positive(title: str, abstract: str, entry_text: str | None) -> tuple[str, str]:
    """(title shown, text learned from) of a library paper: the export's title and
    abstract, or the stored entry's text when the export has no abstract."""
    from bot.taste.features import text_of

    shown = title or (entry_text or "").partition("\n")[0]
    if entry_text is not None and not abstract:
        return shown, entry_text
    return shown, text_of(title, abstract)
