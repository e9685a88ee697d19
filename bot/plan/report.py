"""Plan stage: what a planning pass did (``PlanReport``), with the ids it queued kept
compactly (``IdRuns``).  Never reads the store.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


class IdRuns:
    """Ids in the order they were added, kept as runs of consecutive numbers.

    A planning pass may queue a million digests, and a batch's digests get
    consecutive ids (only its empty digests break a run): runs hold them in a
    fraction of a list's or an array's memory (bench/README.md, planning)."""

    __slots__ = ("_starts", "_lengths", "_count")

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._starts = array("q")
        self._lengths = array("q")
        self._count = 0
        for value in ids:
            self.append(value)

    def append(self, value: int) -> None:
        if self._starts and self._starts[-1] + self._lengths[-1] == value:
            self._lengths[-1] += 1
        else:
            self._starts.append(value)
            self._lengths.append(1)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        for start, length in zip(self._starts, self._lengths, strict=True):
            yield from range(start, start + length)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdRuns) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"IdRuns({list(self)!r})"


@dataclass
class PlanReport:
    """What a pass did; a reader it left out is counted, never a reason to stop the pass."""

    planned: IdRuns = field(default_factory=IdRuns)  # digest ids queued, in order
    empty: int = 0  # due subscribers with nothing new
    not_due: int = 0
    waiting: int = 0  # due, but waiting for the day's dump (schedule.wait_for_dump_minutes)
    ranker_failure: str | None = None  # why the outside ranker's part in the pass ended (``ranker.url``)
    ranker_ranked: int = 0  # readers it ordered (interleaved with the built-in order)
    ranker_skipped: int = 0  # readers who kept the built-in order because it failed
    unreadable: int = 0  # readers left out: a stored setting digestbot never writes (bot.domain.stored)
    unreadable_first: str | None = None  # the first of them: "ada@example.org: time zone 'Mars/Olympus' …"
