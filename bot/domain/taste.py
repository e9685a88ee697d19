"""Domain types of a reader's taste (``bot.taste``): the papers of their library,
the entries they rated, and the vocabulary and model the store keeps for them.
Small frozen dataclasses; never I/O, never the store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class LibraryPaper:
    """A paper a subscriber vouches for (``bot.taste``): read from a reference manager's
    export, matched to a stored entry where one has the same identity."""

    key: str  # "arxiv:<id>", "doi:<doi>" or "paper:<title hash>", as entries are keyed
    title: str
    abstract: str = ""
    arxiv_id: str | None = None
    doi: str | None = None
    entry_id: int | None = None  # the stored entry it is, when there is one
    source: str = ""  # bibtex | ris | csl-json | ids


@dataclass(frozen=True, slots=True)
class RatedEntry:
    """An entry a subscriber rated from their digest (``bot.taste``): "more like this"
    counts as a library paper, "less like this" as one they do not want."""

    entry_id: int
    key: str
    title: str
    verdict: str  # more | less
    at: datetime
    section: str = ""  # the interest it was shown under; "" in a digest of one


@dataclass(frozen=True, slots=True)
class StoredVocabulary:
    """A TF-IDF vocabulary as the store keeps it: the idf as float32 bytes."""

    id: int
    terms: tuple[str, ...]
    idf: bytes
    entries: int  # how many entries it was fitted on


@dataclass(frozen=True, slots=True)
class StoredModel:
    """A reader's model as the store keeps it: term indices as int32 bytes, weights and
    each library paper's values as float32 bytes."""

    vocabulary_id: int
    intercept: float
    indices: bytes
    weights: bytes
    library: tuple[tuple[str, bytes, bytes], ...]  # (title, term indices, values) per paper
