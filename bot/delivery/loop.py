"""Delivery stage: claim due digests, send them, record each outcome.

A digest counts as delivered only when the SMTP server answered 250 after DATA.
The one duplicate window: the process dies after the server's 250 and before
the ``sent`` commit.  The row is still ``sending``; when its lease expires it
is sent again, with the same Message-ID.  At most the messages in flight at
the crash are affected.  Never renders (``bot.mail``), never talks SMTP itself
(``bot.delivery.smtp``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.delivery.batches import Builders, cancel_digests
from bot.delivery.leases import Leases
from bot.delivery.outcomes import Outcomes, record
from bot.delivery.smtp import SmtpPool
from bot.domain import DeliverReport, SubscriberStatus
from bot.mail.mailer import Built, Mailer
from bot.metrics import Metrics
from bot.store.engine import transaction
from bot.store.queue import claim_due
from bot.store.subscribers import subscriber_statuses
from bot.unsubscribes import Journal, journal_of, read_only_sessions

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]


def worker_name() -> str:
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


async def deliver(
    factory: sessionmaker[Session],
    settings: Settings,
    builders: Builders,
    pool: SmtpPool,
    *,
    clock: Clock,
    worker: str | None = None,
    batch: int = 200,
    stop: asyncio.Event | None = None,
    progress: Callable[[int], None] | None = None,
    metrics: Metrics | None = None,
) -> DeliverReport:
    """Send every digest due now, batch by batch, until none is left (or *stop* is set
    between batches: sends in flight always finish and are recorded).  The next
    batch is claimed and built while the previous one is on the wire."""
    builders.mailer.new_run()
    line = _Pipeline(
        factory,
        settings,
        builders,
        pool,
        clock=clock,
        worker=worker or worker_name(),
        progress=progress,
        metrics=metrics,
    )
    ahead = max(1, settings.digest.build_processes)  # batches being built while one is sent
    async with line.leases.kept():
        try:
            while True:
                while len(line.building) < ahead and (stop is None or not stop.is_set()) and line.claim(batch):
                    pass
                if not line.building:
                    break
                await line.send_next()
        finally:
            # Claimed batches are still built and sent when *stop* is set (their leases
            # would otherwise hold them back until they expire); whatever happens to
            # them, the batch on the wire is waited for and recorded.
            try:
                while line.building:
                    await line.send_next()
            finally:
                await line.sent()
    return line.total


class _Pipeline:
    """Claimed batches being built, in order, and the one batch on the wire."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        builders: Builders,
        pool: SmtpPool,
        *,
        clock: Clock,
        worker: str,
        progress: Callable[[int], None] | None,
        metrics: Metrics | None,
    ) -> None:
        self.factory, self.settings, self.builders, self.pool = factory, settings, builders, pool
        self.clock, self.worker, self.progress = clock, worker, progress
        self.total = DeliverReport()
        self.building: deque[tuple[asyncio.Future[tuple[list[Built], DeliverReport]], int, int]] = deque()
        self.sending: asyncio.Future[DeliverReport] | None = None
        self.sending_count = 0
        self.sending_batch = 0
        self.metrics = metrics
        self.leases = Leases(factory, worker=worker, lease_seconds=settings.digest.lease_seconds, clock=clock)

    def claim(self, limit: int) -> bool:
        """Claim up to *limit* due digests and start building them; False when none is due."""
        now = self.clock()
        with transaction(self.factory) as session:
            # First the leases this worker holds, so that none of its own waiting digests is due again.
            self.leases.renew_in(session)
            ids = claim_due(
                session, now=now, worker=self.worker, lease_seconds=self.settings.digest.lease_seconds, limit=limit
            )
        if not ids:
            return False
        built = self.builders.prepare(self.factory, ids, now=now, worker=self.worker)
        self.building.append((asyncio.ensure_future(built), len(ids), self.leases.claimed(ids)))
        return True

    async def send_next(self) -> None:
        """The oldest batch being built, once built, goes on the wire after the one there."""
        future, count, batch = self.building.popleft()
        try:
            built, report = await future
        except BaseException:
            self.leases.release(batch)
            raise
        self.total.add(report)
        await self.sent()
        self.sending = asyncio.ensure_future(
            _send_batch(
                self.factory,
                self.settings,
                self.pool,
                built,
                clock=self.clock,
                worker=self.worker,
                metrics=self.metrics,
                lost=self.leases.lost,
            )
        )
        self.sending_count, self.sending_batch = count, batch

    async def sent(self) -> None:
        """Wait for the batch on the wire, if any, and count what it did."""
        if self.sending is not None:
            try:
                self.total.add(await self.sending)
            finally:
                self.sending = None
                self.leases.release(self.sending_batch)
            if self.progress is not None:
                self.progress(self.sending_count)


async def deliver_now(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    clock: Clock,
    progress: Callable[[int], None] | None = None,
) -> DeliverReport:
    """Open a pool, deliver everything due, close the pool (the CLI's one-shot path)."""
    builders = Builders(Mailer(settings))
    try:
        async with SmtpPool.of(settings) as pool:
            return await deliver(factory, settings, builders, pool, clock=clock, progress=progress)
    finally:
        builders.close()


def due_count(factory: sessionmaker[Session], now: datetime) -> int:
    from bot.store.queue import count_due

    with factory() as session:
        return count_due(session, now)


async def _send_batch(
    factory: sessionmaker[Session],
    settings: Settings,
    pool: SmtpPool,
    built: list[Built],
    *,
    clock: Clock,
    worker: str,
    metrics: Metrics | None = None,
    lost: set[int] | None = None,
) -> DeliverReport:
    """Send a built batch; *lost*: digests whose lease another worker took meanwhile
    (read just before each goes on the wire), which are left to that worker."""
    report = DeliverReport()
    write = functools.partial(record, factory, settings, worker=worker, report=report, metrics=metrics)
    # Recorded as sends finish, not in batch order: what a crash can send twice
    # is only what the server accepted and was not yet recorded.
    outcomes = Outcomes(lambda done: write(done, now=clock()))
    leavers = Leavers(factory, {b.row.subscriber_id for b in built})
    left: list[Built] = []

    async def send(message: Built) -> None:
        taken = False

        async def wanted() -> bool:
            nonlocal taken
            taken = lost is not None and message.row.id in lost
            return not taken and not await leavers.leaving(message.row.subscriber_id)

        result = await pool.send(message.sender, message.recipient, message.data, wanted=wanted)
        if result is None and taken:
            report.lost_lease += 1
        elif result is None:
            left.append(message)
        else:
            outcomes.add(message.row, result)

    try:
        # An exception here is a bug, not an SMTP outcome (those are results): raised.
        await asyncio.gather(*(send(b) for b in built))
    finally:
        leavers.close()
        outcomes.write()
        if left:
            await asyncio.to_thread(_cancel_leavers, factory, left, worker=worker, now=clock(), report=report)
    return report


# How old the journal's word on who is leaving may be when a message goes on the wire: a
# reader who unsubscribes while their batch is being sent is not sent to after this.
LEAVERS_FRESH_SECONDS = 0.05


class Leavers:
    """Who of a batch's readers is leaving: an unsubscribe acknowledged in the journal and
    not yet applied, or a status in the store that is no longer active (applied since the
    batch was built: a batch can wait behind a slow relay for minutes, and the endpoint
    applies requests within a second).  Read again whenever the last reading is older
    than ``LEAVERS_FRESH_SECONDS`` (one read a batch at a time, off the event loop)."""

    def __init__(self, factory: sessionmaker[Session], subscriber_ids: set[int]) -> None:
        self.factory, self.subscriber_ids = factory, subscriber_ids
        self._store: sessionmaker[Session] | None = None  # read-only, opened at the first reading
        self.pending: set[int] = set()
        self.read_at = float("-inf")
        self._reading = asyncio.Lock()

    async def leaving(self, subscriber_id: int) -> bool:
        if time.monotonic() - self.read_at > LEAVERS_FRESH_SECONDS:
            async with self._reading:
                if time.monotonic() - self.read_at > LEAVERS_FRESH_SECONDS:
                    started = time.monotonic()
                    journal = journal_of(self.factory)
                    self.pending = await asyncio.to_thread(self._read, journal)
                    self.read_at = started
        return subscriber_id in self.pending

    def _read(self, journal: Journal) -> set[int]:
        pending = journal.pending_subscribers(self.subscriber_ids)
        if self._store is None:  # on SQLite a reader that never takes the writer's lock
            self._store = read_only_sessions(self.factory)
        with self._store() as session:
            statuses = subscriber_statuses(session, self.subscriber_ids)
        gone = {i for i in self.subscriber_ids if statuses.get(i) is not SubscriberStatus.ACTIVE}
        return pending | gone

    def close(self) -> None:
        if self._store is not None and self._store is not self.factory:
            self._store.kw["bind"].dispose()


def _cancel_leavers(
    factory: sessionmaker[Session], left: list[Built], *, worker: str, now: datetime, report: DeliverReport
) -> None:
    with transaction(factory) as session:
        gone = [(b.row, SubscriberStatus.UNSUBSCRIBED) for b in left]
        report.cancelled += cancel_digests(session, gone, worker=worker, now=now)
