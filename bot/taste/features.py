"""Taste stage, features: the words of an entry (title and summary) and their TF-IDF
vectors.  The vocabulary and its inverse document frequencies are fitted with
scikit-learn's ``TfidfVectorizer`` (``fit_vocabulary``); vectors are made here with
numpy and scipy the way that vectorizer makes them (sublinear term frequency, smoothed
idf, unit length), so that planning never imports scikit-learn.  A test holds the two
to the same numbers.  Pure: never reads the store.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

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

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {term: i for i, term in enumerate(self.terms)})


def vocabulary_of(stored: StoredVocabulary) -> Vocabulary:
    return Vocabulary(stored.id, stored.terms, np.frombuffer(stored.idf, dtype=np.float32))


def fit_vocabulary(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Terms and their idf, fitted on *texts* (the store's entries) by scikit-learn."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    fitted = TfidfVectorizer(
        analyzer=words,
        min_df=2 if len(texts) >= 1000 else 1,  # a small store has few repeats yet
        max_df=0.5 if len(texts) >= 20 else 1.0,
        sublinear_tf=True,
        max_features=MAX_TERMS,
        dtype=np.float32,
    ).fit(texts)
    return [str(t) for t in fitted.get_feature_names_out()], fitted.idf_.astype(np.float32)


def vectors(texts: Sequence[str], vocabulary: Vocabulary) -> csr_matrix:
    """One unit-length TF-IDF row per text, as ``TfidfVectorizer.transform`` makes it."""
    indptr = [0]
    indices: list[int] = []
    data: list[float] = []
    index, idf = vocabulary.index, vocabulary.idf
    for text in texts:
        counts = Counter(j for w in words(text) if (j := index.get(w)) is not None)
        row = sorted(counts.items())
        weights = [(1.0 + math.log(n)) * float(idf[j]) for j, n in row]
        norm = math.sqrt(sum(w * w for w in weights)) or 1.0
        indices.extend(j for j, _ in row)
        data.extend(w / norm for w in weights)
        indptr.append(len(indices))
    shape = (len(texts), len(vocabulary.terms))
    return csr_matrix(
        (np.asarray(data, dtype=np.float32), np.asarray(indices, dtype=np.int32), np.asarray(indptr, dtype=np.int64)),
        shape=shape,
    )
