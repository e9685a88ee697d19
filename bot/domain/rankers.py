"""Domain types of an outside ranker (``bot.rankers``): what one is asked about a
reader and what it answers.  Small frozen dataclasses; never I/O, never the store."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from bot.domain import LibraryPaper, RatedEntry

BUILT_IN = "built-in"  # the built-in ranking's name where an entry says which ranker placed it
RANKER_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")  # an outside ranker's (``ranker.name``)


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


# What ``as_text`` writes at most: the keys and a ranker's name, and per item its position
# in both lists (a number and a separator each).
MAX_TEXT_BASE = 200
MAX_TEXT_PER_ITEM = 24


@dataclass(frozen=True, slots=True)
class Interleaving:
    """A digest's order drafted from the built-in ranking and the outside ranker
    *ranker* (``bot.rankers.interleave``), over the items of its body as planned:
    *order* lists the body's positions as the reader sees them, *theirs* the positions
    *ranker* placed (the built-in ranking placed the others).  Pinned on the digest
    (a short text, where a reordered body would be a row per item), so its resend and
    its web version show the same order."""

    ranker: str
    order: tuple[int, ...]
    theirs: frozenset[int]

    def as_text(self) -> str:
        return json.dumps({"ranker": self.ranker, "order": self.order, "theirs": sorted(self.theirs)})

    @classmethod
    def from_text(cls, text: str | None, size: int) -> Interleaving | None:
        """The interleaving stored as *text* over a body of *size* items; None when there
        is none, or what is stored is not one (a restored backup is outside bytes): the
        digest then shows its body's order and judges no ranker."""
        if not text or len(text) > MAX_TEXT_BASE + MAX_TEXT_PER_ITEM * size:
            return None  # longer than any we write: never parsed (30 MB took 480 MB to parse)
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        ranker, order, theirs = value.get("ranker"), value.get("order"), value.get("theirs")
        if not (isinstance(ranker, str) and RANKER_NAME.fullmatch(ranker)) or ranker == BUILT_IN:
            return None
        if not (isinstance(order, list) and isinstance(theirs, list) and len(order) == size >= len(theirs)):
            return None
        if not all(type(n) is int for n in (*order, *theirs)):  # not bool, not float
            return None
        if set(order) != set(range(size)) or not set(theirs) <= set(order):
            return None
        return cls(ranker, tuple(order), frozenset(theirs))

    def placed_by(self, position: int) -> str:
        """The ranker that placed the body's item at *position*."""
        return self.ranker if position in self.theirs else BUILT_IN
