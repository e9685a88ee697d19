"""Delivery stage: the one writer of a delivery.  Each of its transactions marks the
messages waiting to go on the wire (``queue.put_on_wire``: only a message whose lease is
held, in a store that can be written, goes) and records the outcomes that came in: the
next state the retry and bounce rules give each (``bot.delivery.policy``), the bounce
count it moves, one log line for each failure.  Off the event loop; never sends.

A write that fails stops the delivery's sending at once: nothing more is marked, so
nothing more goes on the wire, and the answers still coming in for what is on the wire
are kept (``Leftovers``) to be written when the store takes writes again.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.delivery.leases import Leases
from bot.delivery.policy import NextState, next_state
from bot.delivery.smtp import SendResult
from bot.domain import DeliverReport, DigestState
from bot.metrics import Metrics
from bot.store.digests import DigestRow
from bot.store.engine import transaction
from bot.store.queue import Finished, count_bounce, finish_many, give_back, put_on_wire, reset_bounces
from bot.store.store_errors import said

log = logging.getLogger("bot.delivery.loop")  # the name operators filter delivery lines by

# Outcomes are written in small groups, with the wire marks waiting then: one
# transaction per message would cost more than building it.  Until written, a sent
# digest is on the wire unrecorded, so a crash leaves it unknown: the window is this
# many messages or this long.
RECORD_EVERY = 64
RECORD_SECONDS = 0.2
# Marks are written ahead of the messages they let out, as many as the relay takes in this
# long (one a connection at least, RECORD_EVERY at most): a crash leaves unknown about
# as much marked and never sent as it leaves answered and not recorded.
MARK_AHEAD_SECONDS = RECORD_SECONDS
PACE_MEMORY = 10.0  # seconds of answers the relay's pace is read from, at most


class StoreUnwritable(Exception):
    """The store refused a delivery's write: nothing more goes on the wire."""


@dataclass
class Answer:
    """One send's answer, for the digest claim it was for, and when it came."""

    row: DigestRow
    result: SendResult
    at: datetime


@dataclass
class Leftovers:
    """What a delivery could not write because the store refused (a full disk), kept by
    the worker to be written first at its next delivery: the answers it got (their
    digests stay on the wire meanwhile, so no worker sends them again; unknown, should
    this process end first), and the claims it could not give back (never on the wire:
    due again then, or when their leases run out)."""

    answers: list[Answer] = field(default_factory=list)
    claims: dict[int, int] = field(default_factory=dict)  # digest id -> attempt

    def __bool__(self) -> bool:
        return bool(self.answers or self.claims)


@dataclass(frozen=True, slots=True)
class _Recorded:
    row: DigestRow
    result: SendResult
    decision: NextState
    bounced: bool


class Recorder:
    """Marks claims as going on the wire and records answers, a transaction at a time,
    grouping what comes in meanwhile (group commit); ``close_gate`` (a stop) lets
    nothing more on the wire.

    A message waits for its own mark, and the marks of the next of its batch are written
    with it (``mark_ahead``: what the relay takes in ``MARK_AHEAD_SECONDS``), so that most
    messages find theirs written already and one transaction serves many.  Marked and
    never sent (a crash after the mark) is unknown: a crash leaves about as many of
    those as answers not yet recorded; a stop gives them back."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        leases: Leases,
        *,
        clock: Callable[[], datetime],
        report: DeliverReport,
        leftovers: Leftovers,
        metrics: Metrics | None = None,
    ) -> None:
        self.factory, self.settings, self.leases, self.clock = factory, settings, leases, clock
        self.report, self.leftovers, self.metrics = report, leftovers, metrics
        self._coming: deque[DigestRow] = deque()  # the batch's rows whose marks are not asked for yet
        self._marks: list[DigestRow] = []  # asked for, not yet in a transaction
        self._pending: dict[int, asyncio.Future[bool]] = {}  # asked for, not yet answered
        self._asked: set[int] = set()  # every row whose mark was asked for: asked once
        self._refused: set[int] = set()  # asked for and not written: another worker's, or recorded
        self._ready: set[int] = set()  # marked, their messages not yet at the gate
        self._answers: list[Answer] = []
        self._answers_due = False
        self._timer: asyncio.TimerHandle | None = None
        self._writer: asyncio.Task[None] | None = None
        self._flush_now = False
        self.gate_closed = False
        self.failure: BaseException | None = None  # the write the store refused
        self.on_wire: set[int] = set()  # through the gate, not yet answered
        self.went_out: set[int] = set()  # every one through the gate in this delivery
        self.answered_at: list[float] = []  # monotonic times of recent answers: the relay's pace

    def expect(self, rows: list[DigestRow]) -> None:
        """The rows of the batch going on the wire, in the order their sends start; the
        first marks are asked for at once, written while the first envelopes are sent."""
        self._coming = deque(rows)
        if rows and not self.gate_closed and self.failure is None:
            self._ask([])

    async def on_wire_now(self, row: DigestRow) -> bool:
        """Whether *row*'s message may go on the wire now: True once the store says so
        (the lease held, the mark written); False when it is another worker's or was
        recorded, or the gate is closed.  Raises ``StoreUnwritable``."""
        if self.failure is not None:
            raise StoreUnwritable(str(self.failure))
        if self.gate_closed:
            return False
        if row.id in self._ready:
            marked = True
        elif row.id in self._refused:
            marked = False
        else:
            pending = self._pending.get(row.id)
            if pending is None:
                self._ask([row])
                pending = self._pending[row.id]
            self._top_up()
            marked = await pending
        self._ready.discard(row.id)
        if not marked or self.gate_closed:
            return False
        self.on_wire.add(row.id)
        self.went_out.add(row.id)
        self._top_up()
        return True

    def answer(self, row: DigestRow, result: SendResult) -> None:
        """A send's answer, written with the next group (``RECORD_EVERY`` of them, or
        ``RECORD_SECONDS`` after the first)."""
        self.on_wire.discard(row.id)
        now = time.monotonic()
        self.answered_at.append(now)
        answer = Answer(row, result, self.clock())
        if self.failure is not None:
            self.leftovers.answers.append(answer)
            return
        self._answers.append(answer)
        if len(self._answers) >= RECORD_EVERY:
            self._start()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(RECORD_SECONDS, self._due)

    def close_gate(self) -> None:
        """Nothing more goes on the wire (a stop); marks asked for are answered False, and
        those written and not yet used are given back with the batch's other claims."""
        self.gate_closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_result(False)
        self._ready.clear()
        self._coming.clear()

    async def flush(self) -> None:
        """Write every answer still waiting (a batch's end)."""
        self._flush_now = True
        try:
            self._start()
            while self._writer is not None:
                await asyncio.shield(self._writer)
        finally:
            self._flush_now = False

    def pace(self, window: float) -> float | None:
        """Answers a second over the last *window* seconds (``PACE_MEMORY`` at most), None
        before two."""
        times, now = self.answered_at, time.monotonic()
        if times and now - times[0] > 2 * PACE_MEMORY:
            del times[: bisect.bisect_left(times, now - PACE_MEMORY)]
        first = bisect.bisect_left(times, now - min(window, PACE_MEMORY))
        if len(times) - first < 2:
            return None
        return (len(times) - first) / max(now - times[first], 1.0)

    @property
    def mark_ahead(self) -> int:
        """How many marks to write at once: the relay's pace over ``MARK_AHEAD_SECONDS``,
        between one a connection and ``RECORD_EVERY``."""
        pace = self.pace(1.0) or 0.0
        return max(self.settings.smtp.pool_size, min(RECORD_EVERY, math.ceil(pace * MARK_AHEAD_SECONDS)))

    def _ask(self, rows: list[DigestRow]) -> None:
        """Marks for *rows*, and for the next of the batch up to ``mark_ahead`` in all."""
        loop = asyncio.get_running_loop()
        wanted = [row for row in rows if row.id not in self._asked]
        # Marks written and not yet used stay within mark_ahead (what a crash leaves unknown).
        room = self.mark_ahead - len(self._ready) - len(self._pending)
        while len(wanted) < room and self._coming:
            following = self._coming.popleft()
            if following.id not in self._asked and all(following.id != row.id for row in wanted):
                wanted.append(following)
        for row in wanted:
            self._asked.add(row.id)
            self._pending[row.id] = loop.create_future()
            self._marks.append(row)
        self._start()

    def _top_up(self) -> None:
        """Ask for the next marks before those written run out."""
        waiting = len(self._ready) + len(self._pending)
        if 2 * waiting < self.mark_ahead and self._coming and not self.gate_closed:
            self._ask([])

    def _due(self) -> None:
        self._timer = None
        self._answers_due = True
        self._start()

    def _start(self) -> None:
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write_while_asked())

    def _due_answers(self) -> list[Answer]:
        """The answers to write now: a full group, one whose time has come, or a flush."""
        if not self._answers or not (self._answers_due or self._flush_now or len(self._answers) >= RECORD_EVERY):
            return []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._answers_due = False
        answers, self._answers = self._answers, []
        return answers

    async def _write_while_asked(self) -> None:
        try:
            while True:
                marks, self._marks = self._marks, []
                answers = self._due_answers()
                if not (marks or answers):
                    return
                try:
                    marked, recorded = self._write(marks, answers)
                except Exception as exc:  # noqa: BLE001 - the store refused: stop sending, keep the answers
                    self._store_refused(exc, answers)
                    return
                self._told(recorded)
                for row in marks:
                    future = self._pending.pop(row.id)
                    if row.id in marked and not self.gate_closed:
                        self._ready.add(row.id)
                    elif row.id not in marked:
                        self._refused.add(row.id)
                    if not future.done():
                        future.set_result(row.id in marked)
        finally:
            self._writer = None

    def _write(self, marks: list[DigestRow], answers: list[Answer]) -> tuple[set[int], list[_Recorded]]:
        """One transaction: the answers recorded, then the marks asked for."""
        settings = self.settings
        with transaction(self.factory) as session:
            recorded = record_in(session, settings, answers, worker=self.leases.worker)
            marked = put_on_wire(
                session,
                [(row.id, row.attempts) for row in marks],
                worker=self.leases.worker,
                now=self.clock(),
                lease_seconds=settings.digest.lease_seconds,
            )
        return marked, recorded

    def _told(self, recorded: list[_Recorded]) -> None:
        self.leases.let_go(done.row.id for done in recorded)
        tell(recorded, self.report, self.metrics, self.clock())

    def _store_refused(self, exc: BaseException, answers: list[Answer]) -> None:
        self.failure = exc
        self.leftovers.answers.extend(answers)
        self.leftovers.answers.extend(self._answers)
        self._answers.clear()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(StoreUnwritable(str(exc)))
        self._pending.clear()
        self._marks.clear()
        self._ready.clear()
        log.error("the store refused a delivery's write (%s): nothing more goes on the wire", said(exc))


def record_in(session: Session, settings: Settings, answers: list[Answer], *, worker: str) -> list[_Recorded]:
    """Record *answers* in *session*'s transaction, for the claims *worker* still holds:
    each digest's next state and the bounces it counts; what was recorded."""
    if not answers:
        return []
    smtp = settings.smtp
    decided = [next_state(a.result, a.row.attempts, smtp, a.at) for a in answers]
    finished = [
        Finished(a.row.id, a.row.attempts, decision.state, a.result.code, decision.error, decision.retry_at)
        for a, decision in zip(answers, decided, strict=True)
    ]
    held = finish_many(session, finished, worker=worker, now=max(a.at for a in answers))
    reset_bounces(
        session,
        [
            a.row.subscriber_id
            for a, decision in zip(answers, decided, strict=True)
            if decision.state is DigestState.SENT and a.row.id in held
        ],
    )
    done = []
    for answer, decision in zip(answers, decided, strict=True):
        if answer.row.id not in held:
            continue
        bounced = decision.bounce and count_bounce(
            session, answer.row.subscriber_id, threshold=smtp.bounce_threshold, now=answer.at
        )
        done.append(_Recorded(answer.row, answer.result, decision, bounced))
    return done


def tell(recorded: list[_Recorded], report: DeliverReport, metrics: Metrics | None, now: datetime) -> None:
    """What was recorded, counted, logged (failures) and measured, once committed."""
    for done in recorded:
        state = done.decision.state
        counter = {
            DigestState.SENT: "sent",
            DigestState.RETRY_WAIT: "retrying",
            DigestState.UNKNOWN: "unknown",
        }.get(state, "failed")
        setattr(report, counter, getattr(report, counter) + 1)
        report.bounced += done.bounced
        _log_outcome(done.row.id, done.row.subscriber_id, state, done.result.detail)
        if metrics is not None:
            metrics.message_done(state, done.result.code, done.row.planned_at, now)


def write_leftovers(
    factory: sessionmaker[Session], settings: Settings, leftovers: Leftovers, *, worker: str
) -> tuple[list[_Recorded], int]:
    """Write what an earlier delivery could not: its answers recorded, its claims given
    back, in one transaction (raises what the store raises; nothing is lost then).  What
    was recorded (a claim another worker has since settled is not), and how many claims
    went back."""
    with transaction(factory) as session:
        recorded = record_in(session, settings, leftovers.answers, worker=worker)
        returned = give_back(session, sorted(leftovers.claims.items()), worker=worker)
    leftovers.answers.clear()
    leftovers.claims.clear()
    return recorded, len(returned)


def _log_outcome(digest_id: int, subscriber_id: int, state: DigestState, detail: str) -> None:
    """Each failure with its reason; a sent message only at debug (a run sends thousands)."""
    level = {DigestState.SENT: logging.DEBUG, DigestState.RETRY_WAIT: logging.INFO}.get(state, logging.WARNING)
    log.log(level, "digest %d (subscriber %d): %s: %s", digest_id, subscriber_id, state.value, detail)
