"""Domain types of an outside ranker (``bot.rankers``): what one is asked about a
reader and what it answers.  Small frozen dataclasses; never I/O, never the store."""

from __future__ import annotations

from dataclasses import dataclass

from bot.domain import LibraryPaper, RatedEntry

BUILT_IN = "built-in"  # the built-in ranking's name where an entry says which ranker placed it


@dataclass(frozen=True, slots=True)
class RankerCandidate:
    """An entry of the day as a ranker sees it, sent once per request whatever the
    number of readers it may go to."""

    entry_id: int
    title: str
    authors: tuple[str, ...] = ()
    summary: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RankerReader:
    """What the built-in model knows of one reader, under an id that names them to one
    ranker only (never an address or a token); *candidates*: the entry ids of the
    request's candidates this reader's filter chose, which the ranker must score."""

    reader: str
    candidates: tuple[int, ...]
    library: tuple[LibraryPaper, ...] = ()
    ratings: tuple[RatedEntry, ...] = ()
    interests: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RankerScore:
    """A ranker's score of one candidate for one reader (higher first), and its short
    reason, which a reader never sees."""

    score: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class JudgedDigest:
    """An interleaved digest that was sent: which ranker placed each entry, and the
    entries its reader rated "More like this" and "Less like this"."""

    digest_id: int
    placed_by: dict[int, str]
    more: frozenset[int]
    less: frozenset[int]
