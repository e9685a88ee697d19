"""Taste stage, the model: a linear classifier per reader, trained on TF-IDF vectors of
the papers they vouch for (their library and "more like this") against what they
marked "less like this" and a sample of the store, as arxiv-sanity-lite does
(scikit-learn's ``LinearSVC``, balanced class weights, a "less like this" weighing
``SAID_LESS`` sample entries).  Entries of the sample that
are close to one of the reader's papers (``CLOSE_TO_POSITIVE``, or the tenth closest)
are left out: they are more likely unread than unwanted.  Only the largest weights
are kept (``MAX_WEIGHTS``), so a model is a few kilobytes.  ``score`` and
``nearest`` use numpy and scipy only.  Pure: the service gives the texts and stores
what comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix, vstack

from bot.domain import StoredModel
from bot.taste.features import RowCache, Vocabulary, vectors

MAX_WEIGHTS = 2000
NEAR_TERMS = 40  # of each library paper, kept to name the nearest one
NEAR_ENOUGH = 0.15  # cosine below which no library paper is named, and no entry is a Top pick
# Sample entries this close to one of the reader's papers, or among the tenth closest,
# are not taken as negatives: more likely unread than unwanted.
CLOSE_TO_POSITIVE = 0.3
# The blend: a score of 1 (as like the reader's papers as those are on average) counts
# as much as a title hit of the filter (weight 3).
BLEND = 3.0
# A "less like this" weighs as much as this many entries of the sample: the reader said
# so, where a sample entry is only probably not theirs.
SAID_LESS = 10.0


@dataclass(frozen=True)
class Model:
    vocabulary_id: int
    intercept: float
    indices: np.ndarray  # int32 term indices of the kept weights
    weights: np.ndarray  # float32
    library: tuple[tuple[str, np.ndarray, np.ndarray], ...]  # (title, term indices, values) per paper

    def dense(self, size: int) -> np.ndarray:
        w = np.zeros(size, dtype=np.float32)
        w[self.indices] = self.weights
        return w


def train(
    vocabulary: Vocabulary,
    positives: Sequence[tuple[str, str]],
    negatives: Sequence[str],
    sample: Sequence[str],
    rows: RowCache | None = None,
) -> Model:
    """A model from the reader's papers (title, text), the texts they marked less, and a
    sample of the store (*rows*: the vectors made before in this pass, reused)."""
    from sklearn.svm import LinearSVC

    good = vectors([text for _, text in positives], vocabulary, rows)
    bad = vectors(list(negatives), vocabulary, rows)
    pool = drawn = vectors(list(sample), vocabulary, rows)
    if pool.shape[0] and good.shape[0]:
        closeness = (pool @ good.T).max(axis=1).toarray().ravel()
        nearest_tenth = np.sort(closeness)[-max(1, pool.shape[0] // 10)]
        unlike = (closeness < CLOSE_TO_POSITIVE) & ((closeness < nearest_tenth) | (closeness == 0))
        pool = pool[np.flatnonzero(unlike)]
    features = vstack([good, bad, pool]).tocsr()
    labels = np.r_[np.ones(good.shape[0]), np.zeros(bad.shape[0] + pool.shape[0])]
    if labels.min() == labels.max():  # nothing to tell the papers from: every weight on their words
        weights = np.asarray(good.mean(axis=0)).ravel()
        intercept = 0.0
    else:
        said = np.r_[np.ones(good.shape[0]), np.full(bad.shape[0], SAID_LESS), np.ones(pool.shape[0])]
        # liblinear shuffles the examples with a seed; without one it draws it from numpy's
        # global generator, and a model depended on how many were trained before it.
        svm = LinearSVC(class_weight="balanced", C=0.1, max_iter=10_000, tol=1e-6, random_state=0)
        svm.fit(features, labels, sample_weight=said)
        weights, intercept = svm.coef_.ravel(), float(svm.intercept_[0])
    kept = np.argsort(-np.abs(weights))[:MAX_WEIGHTS]
    kept = np.sort(kept[weights[kept] != 0]).astype(np.int32)
    scale, offset = _anchors(weights[kept], intercept, good[:, kept], drawn[:, kept])
    return Model(
        vocabulary.id,
        (intercept - offset) / scale,
        kept,
        (weights[kept] / scale).astype(np.float32),
        _library(good, positives),
    )


def _anchors(weights: np.ndarray, intercept: float, good: csr_matrix, drawn: csr_matrix) -> tuple[float, float]:
    """(scale, offset) that make a score 0 for the average entry of the store's sample and
    1 for the average paper of the reader's, so that one threshold means the same for
    every model whatever its margins; (1, 0) when the two cannot be told apart."""
    typical_paper = float(np.mean(good @ weights)) + intercept if good.shape[0] else 1.0
    typical_entry = float(np.mean(drawn @ weights)) + intercept if drawn.shape[0] else 0.0
    spread = typical_paper - typical_entry
    return (spread, typical_entry) if spread > 1e-6 else (1.0, 0.0)


def _library(good: csr_matrix, positives: Sequence[tuple[str, str]]) -> tuple[tuple[str, np.ndarray, np.ndarray], ...]:
    papers = []
    for row, (title, _) in enumerate(positives):
        start, end = good.indptr[row], good.indptr[row + 1]
        indices, values = good.indices[start:end], good.data[start:end]
        top = np.sort(np.argsort(-values)[:NEAR_TERMS])
        papers.append((title, indices[top].astype(np.int32), values[top].astype(np.float32)))
    return tuple(papers)


def stored(model: Model) -> StoredModel:
    """The model as the store keeps it."""
    return StoredModel(
        model.vocabulary_id,
        model.intercept,
        model.indices.astype(np.int32).tobytes(),
        model.weights.astype(np.float32).tobytes(),
        tuple((t, i.astype(np.int32).tobytes(), v.astype(np.float32).tobytes()) for t, i, v in model.library),
    )


def model_of(kept: StoredModel) -> Model:
    """The model the store kept."""
    return Model(
        kept.vocabulary_id,
        kept.intercept,
        np.frombuffer(kept.indices, dtype=np.int32),
        np.frombuffer(kept.weights, dtype=np.float32),
        tuple((t, np.frombuffer(i, dtype=np.int32), np.frombuffer(v, dtype=np.float32)) for t, i, v in kept.library),
    )


def score(model: Model, rows: csr_matrix) -> np.ndarray:
    """The model's score for each row: its margin, scaled so that 0 is a typical entry of
    the store and 1 a typical paper of the reader's (``_anchors``)."""
    margins: np.ndarray = rows @ model.dense(rows.shape[1]) + model.intercept
    return margins


def nearest(model: Model, rows: csr_matrix) -> list[str | None]:
    """Per row, the title of the reader's paper it is closest to, if any is close."""
    if not model.library or not rows.shape[0]:
        return [None] * rows.shape[0]
    library = csr_matrix(
        (
            np.concatenate([values for _, _, values in model.library]),
            np.concatenate([indices for _, indices, _ in model.library]),
            np.cumsum([0] + [len(indices) for _, indices, _ in model.library]),
        ),
        shape=(len(model.library), rows.shape[1]),
    )
    similarity = (rows @ library.T).toarray()
    best = similarity.argmax(axis=1)
    return [model.library[j][0] if similarity[i, j] >= NEAR_ENOUGH else None for i, j in enumerate(best.tolist())]
