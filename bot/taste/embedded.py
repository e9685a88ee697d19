"""Taste stage, a reader's model on embeddings: a logistic regression per reader over the
unit vectors an embedding model made of papers (as Scholar Inbox trains one per reader
on gte-large embeddings), beside the TF-IDF model of ``bot.taste.model``.

The reader's papers (their library and "more like this") are the positives; what they
marked "less like this" and a sample of the store's recent entries are the negatives, a
"less" weighing ``SAID_LESS`` sample entries (as in ``bot.taste.model``), classes
balanced.  A sample entry that is one of the reader's papers is left out.  Pure: the
caller gives the vectors (``bot.domain.llm.packed`` as stored) and keeps nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from bot.domain.llm import VECTOR_DTYPE, WEIGHTS_DTYPE
from bot.taste.model import SAID_LESS

MIN_POSITIVES = 2  # as the TF-IDF model: fewer, and a reader's digest keeps the built-in order
REGULARIZATION = 1.0  # scikit-learn's C: the default, with unit vectors of any dimension


@dataclass(frozen=True)
class EmbeddedModel:
    weights: np.ndarray  # float32, one per dimension
    intercept: float

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        """The model's score of each row of *vectors* (higher: more like the reader's)."""
        return np.asarray(vectors @ self.weights + self.intercept, dtype=np.float64)


def as_matrix(vectors: Sequence[bytes]) -> np.ndarray:
    """Stored vectors (``VECTOR_DTYPE``, one size) as a float32 matrix."""
    if not vectors:
        return np.zeros((0, 0), dtype=np.float32)
    return np.vstack([np.frombuffer(v, dtype=VECTOR_DTYPE) for v in vectors]).astype(np.float32)


def stored_weights(model: EmbeddedModel) -> bytes:
    """*model*'s weights as stored (``WEIGHTS_DTYPE``)."""
    return model.weights.astype(WEIGHTS_DTYPE).tobytes()


def stored_scores(weights: bytes, intercept: float, vectors: Sequence[bytes]) -> list[float] | None:
    """A stored model's score of each stored vector; None when they are no model's and
    vector's (a row a restore brings is outside bytes): no weights, weights or vectors of
    no whole or no common width, or scores that are not numbers."""
    if not vectors or not weights or len(weights) % np.dtype(WEIGHTS_DTYPE).itemsize:
        return None
    model = EmbeddedModel(np.frombuffer(weights, dtype=WEIGHTS_DTYPE), intercept)
    width = np.dtype(VECTOR_DTYPE).itemsize * len(model.weights)
    if any(len(v) != width for v in vectors):
        return None
    with np.errstate(all="ignore"):
        found = model.scores(as_matrix(vectors))
    return [float(s) for s in found] if np.isfinite(found).all() else None


def train_embedded(positives: np.ndarray, less: np.ndarray, sample: np.ndarray) -> EmbeddedModel | None:
    """A reader's model from their papers, what they marked less, and a sample of the
    store (rows of one width); None with fewer than ``MIN_POSITIVES`` papers or nothing
    to tell them from."""
    if len(positives) < MIN_POSITIVES or len(less) + len(sample) == 0:
        return None
    rows = np.vstack([m for m in (positives, less, sample) if len(m)])
    labels = np.concatenate([np.ones(len(positives)), np.zeros(len(less) + len(sample))])
    weights = np.concatenate([np.ones(len(positives)), np.full(len(less), SAID_LESS), np.ones(len(sample))])
    # Balanced as class_weight="balanced" balances counts, here over the weights given.
    weights[labels == 1] *= weights[labels == 0].sum() / max(weights[labels == 1].sum(), 1e-9)
    fit = LogisticRegression(C=REGULARIZATION, max_iter=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a few papers: the order is what counts
        fit.fit(rows, labels, sample_weight=weights)
    return EmbeddedModel(fit.coef_[0].astype(np.float32), float(fit.intercept_[0]))
