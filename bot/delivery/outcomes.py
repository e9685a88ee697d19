"""Delivery stage: the one writer of a delivery.  Each of its transactions marks the
messages waiting to go on the wire (``queue.put_on_wire``: only a message whose lease is
held, in a store that can be written, goes) and records the outcomes that came in: the
next state the retry and bounce rules give each (``bot.delivery.policy``), the bounce
count it moves, one log line for each failure.  A group at a time, in the event loop's
thread (as the loop's own turn); never sends.

A write that fails stops the delivery's sending at once: nothing more is marked, so
nothing more goes on the wire, and the answers still coming in for what is on the wire
are kept (``Leftovers``) to be written when the store takes writes again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.delivery.leases import Leases
from bot.delivery.policy import NextState, next_state
from bot.delivery.smtp import SendResult
from bot.delivery.wire_marks import Pace, WireMarks
from bot.domain import DeliverReport, DigestState
from bot.domain.text import plural
from bot.metrics import Metrics
from bot.store.answers import Finished, count_bounce, finish_many, reset_bounces
from bot.store.digests import DigestRow
from bot.store.engine import transaction
from bot.store.queue import give_back, put_on_wire
from bot.store.store_errors import said

log = logging.getLogger("bot.delivery.loop")  # the name operators filter delivery lines by

# Outcomes are written in small groups, with the wire marks waiting then: one
# transaction per message would cost more than building it.  Until written, a sent
# digest is on the wire unrecorded, so a crash leaves it unknown: the window is this
# many messages or this long.
RECORD_EVERY = 64
RECORD_SECONDS = 0.2


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
    """The delivery's one writer: each transaction writes the marks the gate asked for
    (``WireMarks``) and the answers that are due, grouping what comes in meanwhile
    (group commit)."""

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
        self.pace = Pace()
        self.marks = WireMarks(settings.smtp.pool_size, self.pace, self._start)
        self._answers: list[Answer] = []
        self._answers_due = False
        self._timer: asyncio.TimerHandle | None = None
        self._writer: asyncio.Task[None] | None = None
        self._flush_now = False
        self.failure: BaseException | None = None  # the write the store refused

    def answer(self, row: DigestRow, result: SendResult) -> None:
        """A send's answer, written with the next group (``RECORD_EVERY`` of them, or
        ``RECORD_SECONDS`` after the first)."""
        self.marks.answered(row.id)
        self.pace.note()
        answer = Answer(row, result, self.clock())
        if self.failure is not None:
            self.leftovers.answers.append(answer)
            return
        self._answers.append(answer)
        if len(self._answers) >= RECORD_EVERY:
            self._start()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(RECORD_SECONDS, self._due)

    async def flush(self) -> None:
        """Write every answer still waiting (a batch's end)."""
        self._flush_now = True
        try:
            self._start()
            while self._writer is not None:
                await asyncio.shield(self._writer)
        finally:
            self._flush_now = False

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
        # In the event loop's thread, as a turn of its own: a group's transaction takes
        # about a millisecond, less than the hops to a thread and the GIL's turns cost.
        try:
            while True:
                marks = self.marks.take()
                answers = self._due_answers()
                if not (marks or answers):
                    return
                try:
                    marked, recorded = self._write(marks, answers)
                except Exception as exc:  # noqa: BLE001 - the store refused: stop sending, keep the answers
                    self._store_refused(exc, answers)
                    return
                self._told(recorded)
                self.marks.settle(marks, marked)
                await asyncio.sleep(0)
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
        self.marks.fail(exc)
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


async def leftovers_written(
    factory: sessionmaker[Session],
    settings: Settings,
    leftovers: Leftovers,
    report: DeliverReport,
    *,
    worker: str,
    metrics: Metrics | None = None,
) -> bool:
    """Write what an earlier delivery of *worker* could not (``Leftovers``), off the
    event loop; False (nothing is to be sent) when the store still refuses."""
    if not leftovers:
        return True
    answers, claims = len(leftovers.answers), len(leftovers.claims)
    try:
        recorded, returned = await asyncio.to_thread(write_leftovers, factory, settings, leftovers, worker=worker)
    except Exception as exc:  # noqa: BLE001 - still refused: kept for the next delivery
        log.error(
            "the store still refuses writes (%s): %s and %s kept to be written, nothing sent",
            said(exc),
            plural(answers, "answer"),
            plural(claims, "claim"),
        )
        return False
    tell(recorded, report, metrics, datetime.now(UTC))
    report.given_back += returned
    log.warning(
        "the store takes writes again: recorded %s answered meanwhile, gave back %s",
        plural(len(recorded), "message"),
        plural(returned, "claim"),
    )
    return True


def _log_outcome(digest_id: int, subscriber_id: int, state: DigestState, detail: str) -> None:
    """Each failure with its reason; a sent message only at debug (a run sends thousands)."""
    level = {DigestState.SENT: logging.DEBUG, DigestState.RETRY_WAIT: logging.INFO}.get(state, logging.WARNING)
    log.log(level, "digest %d (subscriber %d): %s: %s", digest_id, subscriber_id, state.value, detail)
