"""Delivery stage: the gate a message passes just before DATA.  A message may go on the
wire only once the store has it marked so (``queue.put_on_wire``, written by the
delivery's one writer, ``outcomes.Recorder``); this keeps which marks are asked for,
written, refused and used, and the relay's pace they are written ahead by.  Never
writes the store itself, never sends.

A message waits for its own mark, and the marks of the next of its batch are written
with it (``WireMarks.ahead``: what the relay takes in ``MARK_AHEAD_SECONDS``), so that
most messages find theirs written already and one transaction serves many.  Marked and
never sent (a crash after the mark) is unknown: a crash leaves about as many of those
as answers not yet recorded; a stop gives them back.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections import deque
from collections.abc import Callable

from bot.store.digests import DigestRow

# A claim: the digest and the attempt it was claimed for.  A mark is a claim's: a digest
# refused with a 4xx and claimed again in the same delivery needs a mark of its own.
Claim = tuple[int, int]

MARK_AHEAD_SECONDS = 0.2  # marks written ahead: what the relay takes in this long
MOST_AHEAD = 64  # and at most this many
PACE_MEMORY = 10.0  # seconds of answers the relay's pace is read from, at most


class StoreUnwritable(Exception):
    """The store refused a delivery's write: nothing more goes on the wire."""


class Pace:
    """The relay's pace, from when its answers came."""

    def __init__(self) -> None:
        self.times: list[float] = []  # monotonic

    def note(self) -> None:
        self.times.append(time.monotonic())

    def per_second(self, window: float) -> float | None:
        """Answers a second over the last *window* seconds (``PACE_MEMORY`` at most), None
        before two."""
        times, now = self.times, time.monotonic()
        if times and now - times[0] > 2 * PACE_MEMORY:
            del times[: bisect.bisect_left(times, now - PACE_MEMORY)]
        first = bisect.bisect_left(times, now - min(window, PACE_MEMORY))
        if len(times) - first < 2:
            return None
        return (len(times) - first) / max(now - times[first], 1.0)


class WireMarks:
    """The marks of one delivery's messages: asked for by the gate (``on_wire_now``) and
    ahead of it, taken by the writer (``take``), settled by what it wrote (``settle``)."""

    def __init__(self, pool_size: int, pace: Pace, write_soon: Callable[[], None]) -> None:
        self.pool_size, self.pace, self.write_soon = pool_size, pace, write_soon
        self._coming: deque[DigestRow] = deque()  # the batch's rows whose marks are not asked for yet
        self._asked_now: list[DigestRow] = []  # asked for, not yet in a transaction
        self._pending: dict[Claim, asyncio.Future[bool]] = {}  # asked for, not yet answered
        self._asked: set[Claim] = set()  # every claim whose mark was asked for: asked once
        self._refused: set[Claim] = set()  # asked for and not written: another worker's, or recorded
        self._ready: set[Claim] = set()  # marked, their messages not yet at the gate
        self.closed = False
        self.failure: BaseException | None = None  # the write the store refused
        self.on_wire: set[int] = set()  # digests through the gate, not yet answered
        self.went_out: set[Claim] = set()  # every claim through the gate in this delivery

    @property
    def ahead(self) -> int:
        """How many marks to have written before their messages come: the relay's pace over
        ``MARK_AHEAD_SECONDS``, between one a connection and ``MOST_AHEAD``."""
        pace = self.pace.per_second(1.0) or 0.0
        return max(self.pool_size, min(MOST_AHEAD, math.ceil(pace * MARK_AHEAD_SECONDS)))

    def expect(self, rows: list[DigestRow]) -> None:
        """The rows of the batch going on the wire, in the order their sends start; the
        first marks are asked for at once, written while the first envelopes are sent."""
        self._coming = deque(rows)
        if rows and not self.closed and self.failure is None:
            self._ask([])

    async def on_wire_now(self, row: DigestRow) -> bool:
        """Whether *row*'s message may go on the wire now: True once the store says so
        (the lease held, the mark written); False when it is another worker's or was
        recorded, or the gate is closed.  Raises ``StoreUnwritable``."""
        if self.failure is not None:
            raise StoreUnwritable(str(self.failure))
        if self.closed:
            return False
        claim = _claim(row)
        if claim in self._ready:
            marked = True
        elif claim in self._refused:
            marked = False
        else:
            pending = self._pending.get(claim)
            if pending is None:
                self._ask([row])
                pending = self._pending[claim]
            self._top_up()
            marked = await pending
        self._ready.discard(claim)
        if not marked or self.closed:
            return False
        self.on_wire.add(row.id)
        self.went_out.add(claim)
        self._top_up()
        return True

    def answered(self, digest_id: int) -> None:
        self.on_wire.discard(digest_id)

    def close(self) -> None:
        """Nothing more goes on the wire (a stop); marks asked for are answered False, and
        those written and not yet used are given back with the batch's other claims."""
        self.closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_result(False)
        self._ready.clear()
        self._coming.clear()

    def take(self) -> list[DigestRow]:
        """The rows whose marks are to be written now."""
        rows, self._asked_now = self._asked_now, []
        return rows

    def settle(self, rows: list[DigestRow], marked: set[int]) -> None:
        """What a transaction wrote of the marks of *rows*: *marked* may go."""
        for row in rows:
            claim = _claim(row)
            future = self._pending.pop(claim)
            if row.id in marked and not self.closed:
                self._ready.add(claim)
            elif row.id not in marked:
                self._refused.add(claim)
            if not future.done():
                future.set_result(row.id in marked)

    def fail(self, exc: BaseException) -> None:
        """The store refused a write: every mark asked for, and every later one, raises."""
        self.failure = exc
        for future in self._pending.values():
            if not future.done():
                future.set_exception(StoreUnwritable(str(exc)))
        self._pending.clear()
        self._asked_now.clear()
        self._ready.clear()

    def _ask(self, rows: list[DigestRow]) -> None:
        """Marks for *rows*, and for the next of the batch up to ``ahead`` in all."""
        loop = asyncio.get_running_loop()
        wanted = [row for row in rows if _claim(row) not in self._asked]
        # Marks written and not yet used stay within ahead (what a crash leaves unknown).
        room = self.ahead - len(self._ready) - len(self._pending)
        while len(wanted) < room and self._coming:
            following = self._coming.popleft()
            if _claim(following) not in self._asked and all(following.id != row.id for row in wanted):
                wanted.append(following)
        for row in wanted:
            self._asked.add(_claim(row))
            self._pending[_claim(row)] = loop.create_future()
            self._asked_now.append(row)
        self.write_soon()

    def _top_up(self) -> None:
        """Ask for the next marks before those written run out."""
        waiting = len(self._ready) + len(self._pending)
        if 2 * waiting < self.ahead and self._coming and not self.closed:
            self._ask([])


def _claim(row: DigestRow) -> Claim:
    return (row.id, row.attempts)
