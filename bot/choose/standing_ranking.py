"""Select stage: the one order a filter's matches are ranked in and the one pick a
digest makes of them, and a filter's standing ranking, kept from one planning pass to
the next.

The order (``order_of``, of ``weight_of``): higher score, more matched atoms, newer published date,
newer first seen, then the lower id.  The pick (``Ordered.pick``): the first *count*
not excluded, how many are left and when the oldest of those was first seen.  Every
ranking, a window's made afresh (``candidates.rank``, ``candidates.pick``) or a kept
one, is ordered and picked from by these two: a change to either is made here once.

A standing ranking holds every entry of a span of days that one filter matches, as
three packed columns: what ordering and picking need of a match, and nothing of its
text.  A pass merges the day's new and changed entries in and forgets those that left
the span, instead of weighing a month again.  Pure: never reads the store
(``bot.plan.standings`` does), never weighs an entry itself.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence, Set
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


_MICROSECOND = timedelta(microseconds=1)


def micros(moment: datetime) -> int:
    """*moment* as whole microseconds since the epoch: exact, and ordered as the moment."""
    return (moment - _EPOCH) // _MICROSECOND


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
        return cls(entry_id, micros(first_seen_at), weight_of(explanation, published))

    def order(self) -> tuple[int, int, int]:
        return order_of(self.entry_id, self.first_seen_us, self.weight)


def weight_of(explanation: Explanation, published: date | None) -> int:
    """A match's score, then matched atoms, then published date, in one number."""
    score = min(max(explanation.score, 0), _MOST_SCORE)
    hits = min(len(explanation.hits), _MOST_HITS)
    day = published.toordinal() if published else 0
    return score << _SCORE_SHIFT | hits << _HITS_SHIFT | day


def order_of(entry_id: int, first_seen_us: int, weight: int) -> tuple[int, int, int]:
    """The ranking order's key: heavier first, then newer first seen, then the lower id."""
    return (-weight, -first_seen_us, entry_id)


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
    """A pick in ids: the first *count* in the window not excluded, how many more are
    left, and the oldest first-seen time among those (None: none left)."""

    chosen: tuple[int, ...]
    left: int
    oldest_left: datetime | None


class Ordered:
    """A ranking as a pick reads it: entry ids best first and when each was first seen
    (microseconds), with what a pick of the whole ranking needs worked out once, when
    first asked: the set of its ids and its positions oldest first."""

    __slots__ = ("_ids", "_oldest_first", "ids", "seen")

    def __init__(self, ids: Sequence[int], seen: Sequence[int]) -> None:
        self.ids, self.seen = ids, seen
        self._ids: frozenset[int] | None = None
        self._oldest_first: list[int] | None = None

    def pick(self, start: datetime | None, exclude: Set[int], count: int) -> StandingPick:
        """The first *count* first seen since *start* (None: all) not in *exclude*, how
        many more are left and the oldest of those.  A pick of the whole ranking reads as
        many as it takes and the excluded ones, not the whole ranking (a reader with weeks
        of left-overs has thousands); one since *start* reads it once."""
        if start is None:
            chosen: list[int] = []
            for entry_id in self.ids:
                if len(chosen) == count:
                    break
                if entry_id not in exclude:
                    chosen.append(entry_id)
            return self._rest_of_whole(chosen, exclude)
        start_us = micros(start)
        chosen = []
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

    def _rest_of_whole(self, chosen: list[int], exclude: Set[int]) -> StandingPick:
        if self._ids is None:
            self._ids = frozenset(self.ids)
        excluded = sum(1 for entry_id in exclude if entry_id in self._ids) if exclude else 0
        left = len(self.ids) - excluded - len(chosen)
        if not left:
            return StandingPick(tuple(chosen), 0, None)
        if self._oldest_first is None:
            self._oldest_first = sorted(range(len(self.ids)), key=lambda n: (self.seen[n], self.ids[n]))
        taken = set(chosen)
        oldest = next(
            self.seen[n] for n in self._oldest_first if self.ids[n] not in exclude and self.ids[n] not in taken
        )
        return StandingPick(tuple(chosen), left, moment(oldest))


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
        """The pick (``Ordered.pick``) of this filter's ranking of the window first seen
        since *start*."""
        return Ordered(self.ids, self.seen).pick(start, exclude, count)

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
