"""Taste stage, the readers' models on embeddings, kept: each reader whose library or
ratings changed, or one of whose papers got its vector, since their model was trained
gets it trained again (``bot.taste.embedded``) and stored (``bot.store.embeddings``).

Run beside the embedding pass (the daemon's language-model job, ``digestbot llm
embed``), never in a planning pass: planning only scores with what is stored, so a pass
with embeddings costs a dot product a candidate.  Cheap when nothing changed: three
grouped queries.  A reader whose model cannot be fitted keeps the built-in order; the
failure is theirs.  Never asks a model.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.store.embeddings import (
    embeddings_of,
    examples_of,
    forget_models,
    models_trained,
    newest_positive_embedded,
    recent_embedded_keys,
    save_models,
)
from bot.store.engine import transaction
from bot.store.taste import taste_signals
from bot.taste import ranking_installed, say_extra_missing

MIN_POSITIVES = 2  # as bot.taste.embedded (not imported here: it loads numpy)
SAMPLE_SIZE = 300  # recent entries a reader's papers are told from
SAMPLE_DAYS = 30
BATCH = 500  # readers trained and written per transaction


@dataclass
class EmbeddedModelsReport:
    trained: int = 0
    unfitted: int = 0  # too few of their papers embedded, or the fit failed: built-in order
    removed: int = 0
    seconds: float = 0.0  # training alone
    slowest: float = 0.0  # one reader's training


def refresh_embedding_models(factory: sessionmaker[Session], model: str, now: datetime) -> EmbeddedModelsReport:
    """Train and keep the model of each reader whose model is stale (see the module)."""
    report = EmbeddedModelsReport()
    with factory() as session:
        signals = taste_signals(session, MIN_POSITIVES)
        trained = models_trained(session, model)
        newest = newest_positive_embedded(session, model) if signals else {}
    gone = [sid for sid in trained if sid not in signals or sid not in newest]
    stale = [
        sid
        for sid, signal in signals.items()
        if sid in newest and (sid not in trained or trained[sid][0] != signal or trained[sid][1] < newest[sid])
    ]
    if gone:
        with transaction(factory) as session:
            report.removed = forget_models(session, gone)
    if not stale:
        return report
    if not ranking_installed():
        say_extra_missing()
        return report
    with factory() as session:
        sample = recent_embedded_keys(session, now - timedelta(days=SAMPLE_DAYS), model, SAMPLE_SIZE)
    for start in range(0, len(stale), BATCH):
        _train_batch(factory, model, sample, stale[start : start + BATCH], signals, report, now)
    return report


def _train_batch(
    factory: sessionmaker[Session],
    model: str,
    sample: list[str],
    readers: list[int],
    signals: dict[int, str],
    report: EmbeddedModelsReport,
    now: datetime,
) -> None:
    from bot.taste.embedded import as_matrix, stored_weights, train_embedded  # numpy and scikit-learn

    with factory() as session:
        examples = examples_of(session, readers)
        wanted = set(sample).union(*(mine | less for mine, less in examples.values()))
        vectors = embeddings_of(session, sorted(wanted), model)
    width = Counter(len(v) for v in vectors.values()).most_common(1)[0][0] if vectors else 0

    def known(keys: set[str] | list[str]) -> list[bytes]:
        return [v for k in sorted(keys) if len(v := vectors.get(k, b"")) == width]

    rows: list[dict[str, object]] = []
    unfitted = 0
    for sid in readers:
        mine, less = examples[sid]
        started = time.perf_counter()
        try:
            fitted = train_embedded(*(as_matrix(known(g)) for g in (mine, less - mine, set(sample) - mine - less)))
        except ValueError:  # a fit that fails is this reader's
            fitted = None
        spent = time.perf_counter() - started
        report.seconds += spent
        report.slowest = max(report.slowest, spent)
        # A model that cannot be fitted is kept as no weights: tried again when it is stale,
        # not at every pass.
        unfitted += fitted is None
        rows.append(
            {
                "subscriber_id": sid,
                "model": model,
                "signal": signals[sid],
                "weights": stored_weights(fitted) if fitted is not None else b"",
                "intercept": fitted.intercept if fitted is not None else 0.0,
                "papers": len(known(mine)),
                "trained_at": now,
            }
        )
    with transaction(factory) as session:
        save_models(session, rows)
    report.trained += len(rows) - unfitted
    report.unfitted += unfitted
