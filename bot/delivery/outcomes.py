"""Delivery stage: each send's outcome recorded: the next state the retry and bounce
rules give it (``bot.delivery.policy``), written in small groups while the lease is
held, with the bounce count it moves and one log line for each failure.  Never sends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.delivery.policy import next_state
from bot.delivery.smtp import SendResult
from bot.domain import DeliverReport, DigestState
from bot.metrics import Metrics
from bot.store.digests import DigestRow
from bot.store.engine import transaction
from bot.store.queue import Finished, count_bounce, finish_many, reset_bounces

log = logging.getLogger("bot.delivery.loop")  # the name operators filter delivery lines by

# Outcomes are written in small groups: one transaction per message would cost
# more than building it.  Until written, a sent digest is still ``sending``, so
# a crash can send it again: the window is this many messages or this long.
RECORD_EVERY = 64


RECORD_SECONDS = 0.2


class Outcomes:
    """Send results waiting to be written: written RECORD_EVERY at a time, or
    RECORD_SECONDS after the first of them came in, whichever is sooner.  A write
    that fails on the timer is raised by the next ``add`` or ``write``, as a write
    that fails there is."""

    def __init__(self, write: Callable[[list[tuple[DigestRow, SendResult]]], None]) -> None:
        self._write = write
        self._waiting: list[tuple[DigestRow, SendResult]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._failed: BaseException | None = None

    def add(self, row: DigestRow, result: SendResult) -> None:
        self._waiting.append((row, result))
        if self._failed is not None or len(self._waiting) >= RECORD_EVERY:
            self.write()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(RECORD_SECONDS, self._on_time)

    def write(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._failed is not None:
            raise self._failed
        waiting, self._waiting = self._waiting, []
        if waiting:
            self._write(waiting)

    def _on_time(self) -> None:
        self._timer = None
        try:
            self.write()
        except Exception as exc:  # noqa: BLE001 - raised again where a caller can see it
            self._failed = exc


def record(
    factory: sessionmaker[Session],
    settings: Settings,
    outcomes: list[tuple[DigestRow, SendResult]],
    *,
    worker: str,
    now: datetime,
    report: DeliverReport,
    metrics: Metrics | None = None,
) -> None:
    if not outcomes:
        return
    smtp = settings.smtp
    decided = [next_state(result, row.attempts, smtp, now) for row, result in outcomes]
    finished = [
        Finished(row.id, decision.state, result.code, decision.error, decision.retry_at)
        for (row, result), decision in zip(outcomes, decided, strict=True)
    ]
    with transaction(factory) as session:
        recorded = finish_many(session, finished, worker=worker, now=now)
        report.lost_lease += len(finished) - len(recorded)  # reclaimed by someone after our lease ran out
        reset_bounces(
            session,
            [
                row.subscriber_id
                for (row, _), f in zip(outcomes, finished, strict=True)
                if f.state is DigestState.SENT and row.id in recorded
            ],
        )
        for (row, result), decision in zip(outcomes, decided, strict=True):
            if row.id not in recorded:
                continue
            if decision.state is DigestState.SENT:
                report.sent += 1
            elif decision.state is DigestState.RETRY_WAIT:
                report.retrying += 1
            else:
                report.failed += 1
            if decision.bounce and count_bounce(session, row.subscriber_id, threshold=smtp.bounce_threshold, now=now):
                report.bounced += 1
            _log_outcome(row.id, row.subscriber_id, decision.state, result.detail)
            if metrics is not None:
                metrics.message_done(decision.state, result.code, row.planned_at, now)


def _log_outcome(digest_id: int, subscriber_id: int, state: DigestState, detail: str) -> None:
    """Each failure with its reason; a sent message only at debug (a run sends thousands)."""
    level = {DigestState.SENT: logging.DEBUG, DigestState.RETRY_WAIT: logging.INFO}.get(state, logging.WARNING)
    log.log(level, "digest %d (subscriber %d): %s: %s", digest_id, subscriber_id, state.value, detail)
