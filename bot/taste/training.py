"""Taste stage: the readers' models trained (``refresh_models``): a TF-IDF vocabulary
fitted on the store's entries when it has grown, and a linear model per reader (and
per interest of a reader of several) trained again only when what it learns from
changed.  Reads and writes the store through ``bot.store``; never renders or sends.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.filters import FilterError, NamedInterest, sections_of
from bot.choose.tagging import TagRules
from bot.domain.stored import THRESHOLD_RANGE
from bot.domain.text import plural
from bot.store.engine import transaction
from bot.store.taste import (
    delete_models,
    entry_count,
    entry_ids,
    feedback_entries,
    filters_of,
    latest_vocabulary,
    latest_vocabulary_id,
    library_rows,
    model_signals,
    newest_entry_id,
    save_models,
    save_vocabulary,
    taste_signals,
    texts_of,
    titled_texts_of,
    vocabulary_size,
)
from bot.taste import ranking_installed, say_extra_missing
from bot.taste.interests import MIN_POSITIVES, Example, Examples, by_interest

log = logging.getLogger(__name__)
# Taste scores run about from 0 (a typical entry) to 1 (a typical library paper): a
# threshold beyond these would mean nothing (bot.taste.model.score).
MIN_THRESHOLD, MAX_THRESHOLD = THRESHOLD_RANGE


@dataclass
class ModelsReport:
    vocabulary_fitted: bool = False
    trained: int = 0  # readers whose models were trained
    models: int = 0  # the models trained (a reader of several interests has several)
    removed: int = 0
    seconds: float = 0.0
    training_seconds: float = 0.0  # of which training the models (the vocabulary's fit apart)
    extra_missing: bool = False  # someone has enough to learn from, but the taste extra is not installed
    unfitted: int = 0  # readers whose models could not be fitted (they keep the built-in order)


# The vocabulary is fitted again when the store has grown by a quarter since.
REFIT_GROWTH = 1.25
MAX_FIT_ENTRIES = 50_000  # the newest entries, when the store holds more (a fit holds their counts)
SAMPLE = 400  # store entries a model learns "not this reader's" from


def refresh_models(
    factory: sessionmaker[Session], now: datetime, only: list[int] | None = None, rules: TagRules | None = None
) -> ModelsReport:
    """Fit the vocabulary again when the store has grown, and train the models of each
    subscriber whose library, feedback or interests (or the vocabulary) changed since
    they were trained: the model of all they keep and rate, and one per interest with
    enough of its own (``bot.taste.interests``; a library paper belongs to the
    interests whose filter, with the tags *rules* give, matches it).  Cheap when nothing
    changed: a few queries, and nothing numerical is imported."""
    import time

    started = time.perf_counter()
    report = ModelsReport()
    with factory() as session:
        signals = taste_signals(session, MIN_POSITIVES)
        trained = model_signals(session)
        count, fitted = (entry_count(session), vocabulary_size(session)) if signals else (0, None)
    report.removed = _remove_models(factory, [sid for sid in trained if sid not in signals])
    if not count or not _any_to_train(signals, only):
        return report
    if not ranking_installed():
        say_extra_missing()
        report.extra_missing = True
        return report
    if fitted is None or count >= fitted * REFIT_GROWTH:
        report.vocabulary_fitted = _fit_vocabulary(factory, count, now)
    wanted, interests = _wanted(factory, signals, only, rules)
    stale = [sid for sid, sig in wanted.items() if trained.get(sid) != sig]
    if stale:
        judge = rules or TagRules(())
        training = time.perf_counter()
        unfitted: list[str] = []
        report.models = _train(factory, stale, wanted, now, lambda sid: (interests[sid], judge), unfitted)
        report.unfitted = len(unfitted)
        if unfitted:
            log.warning(
                "%s could not be fitted (%s): their digests keep the built-in order",
                plural(len(unfitted), "reader's taste model"),
                unfitted[0],
            )
        report.trained = len(stale)
        report.training_seconds = time.perf_counter() - training
        log.info(
            "trained %s of %s in %.1f s",
            plural(report.models, "taste model"),
            plural(report.trained, "reader"),
            time.perf_counter() - started,
        )
    report.seconds = time.perf_counter() - started
    return report


def _remove_models(factory: sessionmaker[Session], gone: list[int]) -> int:
    """Delete the models of *gone* (their library went, or went below the minimum)."""
    if not gone:
        return 0
    with transaction(factory) as session:
        return delete_models(session, gone)


def _any_to_train(signals: dict[int, str], only: list[int] | None) -> bool:
    """Whether anyone (of *only*, when given) has enough to learn from: asked about a
    reader without, the vocabulary is not fitted again on their behalf."""
    return any(sid in signals for sid in only) if only is not None else bool(signals)


def _fit_vocabulary(factory: sessionmaker[Session], count: int, now: datetime) -> bool:
    from bot.store.entry_reads import entry_texts
    from bot.taste.features import fit_vocabulary, text_of

    texts: list[str] = []
    after = 0
    with factory() as session:
        after = max(0, newest_entry_id(session) - MAX_FIT_ENTRIES) if count > MAX_FIT_ENTRIES else 0
        while rows := entry_texts(session, after_id=after, limit=5000):
            texts.extend(text_of(title, text) for _, title, text in rows)
            after = rows[-1][0]
    try:
        terms, idf = fit_vocabulary(texts[-MAX_FIT_ENTRIES:])
    except ValueError as exc:  # entries without a word: the models keep the vocabulary they have
        log.warning("the taste vocabulary could not be fitted on %d entries: %s", len(texts), exc)
        return False
    with transaction(factory) as session:
        save_vocabulary(session, terms, idf.astype("float32").tobytes(), count, now)
    return True


def _wanted(
    factory: sessionmaker[Session], signals: dict[int, str], only: list[int] | None, rules: TagRules | None
) -> tuple[dict[int, str], dict[int, tuple[NamedInterest, ...]]]:
    """What the models of each subscriber (of *only*) with enough to learn from must be
    trained from, and their interests.  Without the *rules*, readers of several
    interests are left to the next planning pass."""
    with factory() as session:
        vocabulary_id = latest_vocabulary_id(session)
        filters = filters_of(session, [sid for sid in signals if only is None or sid in only])
    interests = {sid: filter_interests(text) for sid, text in filters.items()}
    wanted = {
        sid: _signals(vocabulary_id, signals[sid], filters[sid], interests[sid], rules)
        for sid in filters
        if rules is not None or not interests[sid]
    }
    return wanted, interests


def filter_interests(filter_text: str) -> tuple[NamedInterest, ...]:
    """The named interests of a stored filter; none for one of one interest."""
    try:
        return sections_of(filter_text)
    except FilterError:  # stored filters parsed when saved; a reader without interests then
        return ()


def _signals(
    vocabulary_id: int | None,
    signals: str,
    filter_text: str,
    interests: tuple[NamedInterest, ...],
    rules: TagRules | None,
) -> str:
    """What a subscriber's models are trained from: the vocabulary, their library and
    feedback, and (for a reader of several interests) the interests and the tag rules
    that judge which papers belong to which."""
    if not interests or rules is None:
        return f"{vocabulary_id}:{signals}"
    judged = hashlib.blake2b(f"{filter_text}\x00{rules.fingerprint}".encode(), digest_size=8).hexdigest()
    return f"{vocabulary_id}:{signals}:{judged}"


def _train(
    factory: sessionmaker[Session],
    stale: list[int],
    wanted: dict[int, str],
    now: datetime,
    interests_of: Callable[[int], tuple[tuple[NamedInterest, ...], TagRules]],
    unfitted: list[str],
) -> int:
    """Train and save the models of *stale*; how many.  A reader whose models cannot be
    fitted is named in *unfitted* and keeps what they had (none: the built-in order)."""
    from bot.taste.features import RowCache, vocabulary_of
    from bot.taste.model import stored, train

    with factory() as session:
        found = latest_vocabulary(session)
        ids = entry_ids(session)
    if found is None:
        return 0
    vocabulary = vocabulary_of(found)
    rows = RowCache(vocabulary)  # the samples of readers overlap, and a reader's models share theirs
    texts = EntryTexts()
    models_trained = 0
    for subscriber_id in stale:
        with factory() as session:
            examples = _examples(session, subscriber_id, ids, texts)
        sets = {"": examples, **by_interest(*interests_of(subscriber_id), examples)}
        try:
            models = {
                name: stored(
                    train(
                        vocabulary,
                        [(e.title, e.text) for e in s.positives],
                        [e.text for e in s.negatives],
                        s.sample,
                        rows,
                    )
                )
                for name, s in sets.items()
            }
        except (ValueError, ArithmeticError) as exc:  # that reader only: their digests keep their order
            unfitted.append(f"subscriber {subscriber_id}: {' '.join(str(exc).split())[:200]}")
            continue
        models_trained += len(models)
        try:
            with transaction(factory) as session:
                save_models(session, subscriber_id, models, wanted[subscriber_id], now)
        except IntegrityError:  # another process (the scheduler, `library add`) saved them meanwhile
            log.info("models of subscriber %d saved by another process", subscriber_id)
    return models_trained


class EntryTexts:
    """Entries' texts as the models see them, read once in a training pass: the samples of
    readers overlap.  Holds at most ``LIMIT``, then starts afresh."""

    LIMIT = 20_000

    def __init__(self) -> None:
        self.known: dict[int, str] = {}

    def of(self, session: Session, ids: list[int]) -> dict[int, str]:
        missing = [i for i in ids if i not in self.known]
        if len(self.known) + len(missing) > self.LIMIT:
            self.known.clear()
            missing = ids
        self.known.update(texts_of(session, missing))
        return {i: self.known[i] for i in ids if i in self.known}


def _examples(session: Session, subscriber_id: int, ids: list[int], known: EntryTexts | None = None) -> Examples:
    """What the subscriber's models learn from: their positives from the library and
    "more like this", "less like this", and a sample of the store drawn without those
    (*known*: the texts read before in this pass)."""
    import random

    papers = library_rows(session, subscriber_id)
    more, less = feedback_entries(session, subscriber_id)
    in_library = {entry_id for *_, entry_id in papers if entry_id is not None}
    mine = in_library | {i for i, _ in more} | {i for i, _ in less}
    drawn = random.Random(subscriber_id).sample(ids, min(len(ids), SAMPLE + len(mine)))
    pool = [i for i in drawn if i not in mine][:SAMPLE]
    texts = (known or EntryTexts()).of(session, [*pool, *in_library])
    titled = titled_texts_of(session, [i for i, _ in more if i not in in_library] + [i for i, _ in less])
    positives = [
        Example(*_positive(title, abstract, texts.get(entry_id or 0))) for _, title, abstract, entry_id in papers
    ]
    # liblinear's result depends on the order of the examples: "more" by entry id, "less" as rated.
    return Examples(
        positives + _rated(sorted(more), titled), _rated(less, titled), [texts[i] for i in pool if i in texts]
    )


def _rated(rated: list[tuple[int, str]], titled: dict[int, tuple[str, str]]) -> list[Example]:
    """The rated entries as examples, each of the interest it was shown under."""
    from bot.taste.features import text_of

    return [Example(titled[i][0], text_of(*titled[i]), section or None) for i, section in rated if i in titled]


def _positive(title: str, abstract: str, entry_text: str | None) -> tuple[str, str]:
    """(title shown, text learned from) of a library paper: the export's title and
    abstract, or the stored entry's text when the export has no abstract."""
    from bot.taste.features import text_of

    shown = title or (entry_text or "").partition("\n")[0]
    if entry_text is not None and not abstract:
        return shown, entry_text
    return shown, text_of(title, abstract)
