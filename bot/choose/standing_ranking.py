"""Select stage: a filter's standing ranking, kept from one planning pass to the next.

Every entry of a span of days that one filter matches, in ``select.rank``'s order
(higher score, more matched atoms, newer published date, newer first seen, then the
lower id), held as five packed columns: what ordering and ``select.pick`` need of a
match, and nothing of its text.  A pass merges the day's new and changed entries in
and forgets those that left the span, instead of weighing a month again; it picks for
a reader as ``select.pick`` would from a ranking of the whole window.  Pure: never
reads the store (``bot.plan.standings`` does), never weighs an entry itself.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Set
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import compress

from bot.choose.matching import Explanation

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COLUMNS = ("ids", "seen", "weight")
_FORMAT = b"SR2"  # a stored ranking's first bytes: which layout follows
# A match's score, hits and published date in one number ordered as the three are:
# below 2**22 points, 2**16 hits and the ordinal of 31 December 9999 (under 2**24).
_HITS_SHIFT, _SCORE_SHIFT = 24, 40
_MOST_HITS, _MOST_SCORE = 2**16 - 1, 2**22 - 1


def micros(moment: datetime) -> int:
    """*moment* as whole microseconds since the epoch: exact, and ordered as the moment."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def moment(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


@dataclass(frozen=True, slots=True)
class Match:
    """What a ranking keeps of one entry a filter matches: its id, when it was first
    seen, and its weight (score, then matched atoms, then published date)."""

    entry_id: int
    first_seen_us: int
    weight: int

    @classmethod
    def of(cls, entry_id: int, first_seen_at: datetime, published: date | None, explanation: Explanation) -> Match:
        score = min(max(explanation.score, 0), _MOST_SCORE)
        hits = min(len(explanation.hits), _MOST_HITS)
        day = published.toordinal() if published else 0
        return cls(entry_id, micros(first_seen_at), score << _SCORE_SHIFT | hits << _HITS_SHIFT | day)

    def order(self) -> tuple[int, int, int]:
        """``select.rank``'s key, the entry id last (the order a window sorted by id keeps)."""
        return (-self.weight, -self.first_seen_us, self.entry_id)


class _Orders:
    """A ranking's order keys, made one at a time as a binary search asks."""

    def __init__(self, standing: Standing) -> None:
        self.weight, self.seen, self.ids = standing.weight, standing.seen, standing.ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, n: int) -> tuple[int, int, int]:
        return (-self.weight[n], -self.seen[n], self.ids[n])


@dataclass(frozen=True, slots=True)
class StandingPick:
    """``select.Picked`` in ids: the first *count* in the window not excluded, how many
    more are left, and the oldest first-seen time among those (None: none left)."""

    chosen: tuple[int, ...]
    left: int
    oldest_left: datetime | None


class Standing:
    """One filter's matches over a span, best first (see the module's docstring)."""

    def __init__(self, matches: Iterable[Match] = ()) -> None:
        ordered = sorted(matches, key=Match.order)
        self.ids = array("q", (m.entry_id for m in ordered))
        self.seen = array("q", (m.first_seen_us for m in ordered))
        self.weight = array("q", (m.weight for m in ordered))

    def __len__(self) -> int:
        return len(self.ids)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Standing) and all(getattr(self, c) == getattr(other, c) for c in _COLUMNS)

    def matches(self) -> list[Match]:
        return [Match(*row) for row in zip(self.ids, self.seen, self.weight, strict=True)]

    def merged(self, weighed: Iterable[int], found: Iterable[Match], since_us: int) -> Standing:
        """This ranking with every entry of *weighed* (new or changed) replaced by what
        was *found* of them (the ones the filter matches now), and the entries first seen
        before *since_us* forgotten.  A day's few hundred matches are placed by binary
        search among the month's thousands, and each column is copied once, in slices."""
        gone = set(weighed)
        keep = [entry_id not in gone and seen >= since_us for entry_id, seen in zip(self.ids, self.seen, strict=True)]
        kept = Standing()
        for column in _COLUMNS:
            setattr(kept, column, array("q", compress(getattr(self, column), keep)))
        new = sorted((m for m in found if m.first_seen_us >= since_us), key=Match.order)
        if not new:
            return kept
        orders = _Orders(kept)
        places = [bisect_left(orders, m.order()) for m in new]
        result = Standing()
        for column, values in (
            ("ids", [m.entry_id for m in new]),
            ("seen", [m.first_seen_us for m in new]),
            ("weight", [m.weight for m in new]),
        ):
            old, out, at = getattr(kept, column), array("q"), 0
            for place, value in zip(places, values, strict=True):
                out.extend(old[at:place])
                out.append(value)
                at = place
            out.extend(old[at:])
            setattr(result, column, out)
        return result

    def pick(self, start: datetime | None, exclude: Set[int], count: int) -> StandingPick:
        """What ``select.pick`` gives of this filter's ranking of the window first seen
        since *start*: the first *count* not excluded, in one reading of the ranking that
        also counts the rest and finds the oldest of them."""
        start_us = -sys.maxsize if start is None else micros(start)
        chosen: list[int] = []
        left, oldest = 0, sys.maxsize
        for entry_id, seen in zip(self.ids, self.seen, strict=True):
            if seen < start_us or entry_id in exclude:
                continue
            if len(chosen) < count:
                chosen.append(entry_id)
                continue
            left += 1
            if seen < oldest:
                oldest = seen
        return StandingPick(tuple(chosen), left, moment(oldest) if left else None)

    def encode(self) -> bytes:
        parts = [_FORMAT, len(self).to_bytes(8, "little")]
        for column in _COLUMNS:
            values = array("q", getattr(self, column))
            if sys.byteorder != "little":
                values.byteswap()
            parts.append(values.tobytes())
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes) -> Standing | None:
        """The ranking *data* holds, or None when it is not one this code wrote (a
        stored ranking is a cache: a bad one is made again, never trusted)."""
        head = len(_FORMAT) + 8
        if len(data) < head or data[: len(_FORMAT)] != _FORMAT:
            return None
        count = int.from_bytes(data[len(_FORMAT) : head], "little")
        if len(data) != head + 8 * count * len(_COLUMNS):
            return None
        standing = cls()
        for n, column in enumerate(_COLUMNS):
            values = array("q")
            values.frombytes(data[head + 8 * count * n : head + 8 * count * (n + 1)])
            if sys.byteorder != "little":
                values.byteswap()
            setattr(standing, column, values)
        return standing

    def holds(self, found: Iterable[Match], weighed: Iterable[int]) -> bool:
        """Whether this ranking already says what *found* says of the entries *weighed*
        (a pass that weighs again the last hour's entries, unchanged, writes nothing)."""
        wanted = set(weighed)
        found = list(found)
        if sum(map(wanted.__contains__, self.ids)) != len(found):  # counted in C: most passes differ here
            return False
        position = {entry_id: n for n, entry_id in enumerate(self.ids) if entry_id in wanted}
        return all(
            (n := position.get(m.entry_id)) is not None
            and (self.seen[n], self.weight[n]) == (m.first_seen_us, m.weight)
            for m in found
        )
