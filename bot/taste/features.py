"""Taste stage, features: the words of an entry (title and summary) and their TF-IDF
vectors.  The vocabulary and its inverse document frequencies are fitted with
scikit-learn's ``TfidfVectorizer`` (``fit_vocabulary``); vectors are made here with
numpy and scipy the way that vectorizer makes them (sublinear term frequency, smoothed
idf, unit length), so that planning never imports scikit-learn.  A test holds the two
to the same numbers.  Pure: never reads the store.
"""

from __future__ import annotations

import math
import operator
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from scipy.sparse import csr_matrix

from bot.domain import StoredVocabulary

MAX_TERMS = 30_000  # a vocabulary of words and word pairs; most stores use fewer
_WORD = re.compile(r"[^\W\d_][\w-]*[^\W_]")
# Words that say nothing about a paper's topic: English function words and the
# phrases every abstract uses.
STOP_WORDS = frozenset(
    """a about above after again against all also an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having here how however i if in into is it its itself just more most no nor not now of
    off on once only or other our ours out over own same should so some such than that the their
    theirs them then there these they this those through to too under until up very was we were what
    when where which while who whom why will with within without would you your yours via using use
    used uses based new novel propose proposed proposes present presents show shows shown paper work
    approach approaches method methods result results existing different well first one two three
    may many much often further thus therefore achieve achieves achieved demonstrate demonstrates
    compared across including enable enables provide provides significant significantly""".split()
)


def words(text: str) -> list[str]:
    """The words of *text* (folded, stop words out) and each pair of neighbouring words."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    tokens = [t for t in _WORD.findall(folded) if t not in STOP_WORDS]
    return tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]


def text_of(title: str, summary: str) -> str:
    return f"{title}\n{summary}"


@dataclass(frozen=True)
class Vocabulary:
    id: int
    terms: tuple[str, ...]
    idf: np.ndarray  # float32, one per term
    index: dict[str, int] = field(init=False, repr=False, compare=False)
    idf_values: list[float] = field(init=False, repr=False, compare=False)  # the idf as Python floats, for rows

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {term: i for i, term in enumerate(self.terms)})
        object.__setattr__(self, "idf_values", self.idf.tolist())


def vocabulary_of(stored: StoredVocabulary) -> Vocabulary:
    return Vocabulary(stored.id, stored.terms, np.frombuffer(stored.idf, dtype=np.float32))


def fit_vocabulary(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Terms and their idf, fitted on *texts* (the store's entries) by scikit-learn;
    ValueError when the texts have no word at all."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    # The bounds drop terms too rare or too common to tell papers apart; a store where
    # every term is one or the other (one summary shared by all, titles that differ in
    # one word) keeps all its terms rather than none.  Without any word: ValueError.
    bounds = [(2 if len(texts) >= 1000 else 1, 0.5 if len(texts) >= 20 else 1.0), (1, 1.0)]
    for min_df, max_df in bounds:
        vectorizer = TfidfVectorizer(
            analyzer=words, min_df=min_df, max_df=max_df, sublinear_tf=True, max_features=MAX_TERMS, dtype=np.float32
        )
        try:
            fitted = vectorizer.fit(texts)
        except ValueError:
            if (min_df, max_df) == bounds[-1]:
                raise
            continue
        break
    return [str(t) for t in fitted.get_feature_names_out()], fitted.idf_.astype(np.float32)


Row = tuple[np.ndarray, np.ndarray]  # one text's term indices (int32) and unit-length weights (float32)


def _row(text: str, index: dict[str, int], idf: list[float]) -> Row:
    counts: Counter[int | None] = Counter(map(index.get, words(text)))  # in C; words not in the vocabulary: None
    counts.pop(None, None)
    row = cast(list[tuple[int, int]], sorted(counts.items()))
    weights = [(1.0 + math.log(n)) * idf[j] for j, n in row]
    norm = math.sqrt(sum(map(operator.mul, weights, weights))) or 1.0
    terms = [j for j, _ in row]
    return np.array(terms, np.int32), np.array([w / norm for w in weights], np.float32)


class RowCache:
    """Rows already made with one vocabulary, by text: a training pass makes the vectors of
    the same store entries reader after reader (their samples overlap) and for each model of
    a reader, and making a row (the words, their counts) is most of what training cost.
    Holds at most ``LIMIT`` rows, then starts afresh."""

    LIMIT = 20_000

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self.rows: dict[str, Row] = {}

    def row(self, text: str) -> Row:
        found = self.rows.get(text)
        if found is None:
            if len(self.rows) >= self.LIMIT:
                self.rows.clear()
            found = self.rows[text] = _row(text, self.vocabulary.index, self.vocabulary.idf_values)
        return found


def vectors(texts: Sequence[str], vocabulary: Vocabulary, cache: RowCache | None = None) -> csr_matrix:
    """One unit-length TF-IDF row per text, as ``TfidfVectorizer.transform`` makes it
    (*cache*: rows made before with this vocabulary, kept and reused)."""
    if cache is not None and cache.vocabulary is not vocabulary:
        raise ValueError("the row cache was made with another vocabulary")
    index, idf = vocabulary.index, vocabulary.idf_values
    rows = [cache.row(text) if cache is not None else _row(text, index, idf) for text in texts]
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(indices) for indices, _ in rows], out=indptr[1:])
    indices = np.concatenate([i for i, _ in rows]) if rows else np.zeros(0, np.int32)
    data = np.concatenate([d for _, d in rows]) if rows else np.zeros(0, np.float32)
    return csr_matrix((data, indices, indptr), shape=(len(texts), len(vocabulary.terms)))
