"""Delivery stage: claim due digests, send them, record each outcome.

A digest counts as delivered only when the SMTP server answered 250 after DATA, and a
message goes on the wire only once the store has it marked so, in a transaction that
found this worker's claim still held (``bot.delivery.outcomes``).  So no digest is sent
twice by the workers, whatever pauses or dies when: a digest whose worker stopped
answering after the mark is ``unknown`` (the server may have it), never sent again by
itself; one never marked is due again.  Claims run only a few seconds ahead of what the
relay takes, and a stop gives back at once every claim not on the wire and waits at most
``digest.stop_seconds`` for the replies to those that are.  Never renders
(``bot.mail``), never talks SMTP itself (``bot.delivery.smtp``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.delivery.batches import Builders, cancel_digests
from bot.delivery.leases import Leases
from bot.delivery.leavers import LeavingLookup
from bot.delivery.outcomes import Leftovers, Recorder, leftovers_written
from bot.delivery.smtp import SmtpPool
from bot.delivery.wire_marks import StoreUnwritable
from bot.domain import DeliverReport, SubscriberStatus
from bot.domain.text import plural
from bot.mail.mailer import BuiltMessage, Mailer
from bot.mail.parts import Parts
from bot.metrics import Metrics
from bot.store.engine import transaction
from bot.store.queue import claim_due, settle_unanswered
from bot.store.store_errors import said

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]

# A claim holds what the relay takes in this long (as its answers have come so far): what
# a stop gives back, or a crash leaves to its leases, stays a few seconds' worth.
CLAIM_AHEAD_SECONDS = 10.0


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
    leftovers: Leftovers | None = None,
) -> DeliverReport:
    """Send every digest due now, batch by batch, until none is left, *stop* is set or
    the store refuses a write.  The next batch is claimed and built while the previous
    one is on the wire.  *leftovers*: what an earlier delivery of this worker could not
    write, written first (and what this one cannot write is kept there)."""
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
        leftovers=leftovers if leftovers is not None else Leftovers(),
    )
    if not await leftovers_written(factory, settings, line.leftovers, line.total, worker=line.worker, metrics=metrics):
        return line.total
    ahead = max(1, settings.digest.build_processes)  # batches being built while one is sent
    line.stop = stop
    async with line.leases.kept(), stopping_on(stop, line.stop_now):
        try:
            while line.sending_allowed():
                while len(line.building) < ahead and line.sending_allowed() and line.claim(line.claim_size(batch)):
                    pass
                if not line.building:
                    break
                await line.send_next()
        finally:
            # Whatever ended the loop, the batch on the wire is waited for and recorded;
            # batches claimed meanwhile are sent, or given back when sending stopped.
            try:
                while line.building:
                    await line.send_next()
            finally:
                await line.sent()
    line.say_why_it_stopped()
    return line.total


@contextlib.asynccontextmanager
async def stopping_on(stop: asyncio.Event | None, stop_now: Callable[[], None]) -> AsyncIterator[None]:
    """While the block runs, a *stop* set calls *stop_now* at once."""
    if stop is None:
        yield
        return

    async def watch() -> None:
        await stop.wait()
        stop_now()

    watcher = asyncio.ensure_future(watch())
    try:
        yield
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


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
        leftovers: Leftovers,
    ) -> None:
        self.factory, self.settings, self.builders, self.pool = factory, settings, builders, pool
        self.clock, self.worker, self.progress = clock, worker, progress
        self.total = DeliverReport()
        self.building: deque[tuple[asyncio.Future[tuple[list[BuiltMessage], DeliverReport]], int]] = deque()
        self.sending: asyncio.Future[DeliverReport] | None = None
        self.sending_count = 0
        self.sending_batch = 0
        self.metrics = metrics
        self.leftovers = leftovers
        self.leases = Leases(factory, worker=worker, lease_seconds=settings.digest.lease_seconds, clock=clock)
        self.recorder = Recorder(
            factory, settings, self.leases, clock=clock, report=self.total, leftovers=leftovers, metrics=metrics
        )
        self.stopped = False
        self.stop: asyncio.Event | None = None

    def sending_allowed(self) -> bool:
        stopping = self.stopped or (self.stop is not None and self.stop.is_set())
        return not stopping and self.recorder.failure is None

    def claim_size(self, most: int) -> int:
        """What the relay takes in ``CLAIM_AHEAD_SECONDS``, as its answers came so far
        (``smtp.rate_per_second`` at most), between the pool's size and *most*; before
        any answer, a few per connection."""
        smtp = self.settings.smtp
        pace = self.recorder.pace.per_second(CLAIM_AHEAD_SECONDS)
        size = 4 * smtp.pool_size if pace is None else math.ceil(pace * CLAIM_AHEAD_SECONDS)
        if smtp.rate_per_second:
            size = min(size, math.ceil(smtp.rate_per_second * CLAIM_AHEAD_SECONDS))
        return max(smtp.pool_size, min(most, size))

    def claim(self, limit: int) -> bool:
        """Claim up to *limit* due digests and start building them; False when none is due."""
        now = self.clock()
        with transaction(self.factory) as session:
            # First the leases this worker holds, so that none of its own waiting digests is due again.
            self.leases.renew_in(session)
            unanswered = settle_unanswered(session, now=now)
            claims = claim_due(
                session, now=now, worker=self.worker, lease_seconds=self.settings.digest.lease_seconds, limit=limit
            )
        if unanswered:
            log.warning(
                "%s on the wire, unanswered, when the worker's lease ran out: unknown, never sent again by itself (%s)",
                plural(len(unanswered), "digest was", "digests were"),
                ", ".join(f"#{i}" for i in unanswered[:10]) + (" ..." if len(unanswered) > 10 else ""),
            )
        if not claims:
            return False
        ids = [claim.digest_id for claim in claims]
        built = self.builders.prepare(self.factory, ids, now=now, worker=self.worker)
        self.building.append((asyncio.ensure_future(built), self.leases.hold(claims)))
        return True

    async def send_next(self) -> None:
        """The oldest batch being built, once built, goes on the wire after the one there
        (or, when sending stopped, is given back)."""
        future, batch = self.building.popleft()
        try:
            built, report = await future
        except BaseException:
            self.leases.release(batch)
            raise
        self.total.add(report)
        await self.sent()
        claims = self.leases.claims_of(batch)
        # A digest another worker claimed between this claim and the build is not this batch's,
        # and one the build recorded (its reader left, its message could not be built) is done.
        built = [b for b in built if claims.get(b.row.id) == b.row.attempts]
        self.leases.let_go(set(claims) - {b.row.id for b in built})
        if not self.sending_allowed():
            self.total.given_back += await self.leases.give_back(dict(claims))
            self.leases.release(batch)
            return
        self.sending = asyncio.ensure_future(self._send_batch(built, batch))
        self.sending_count, self.sending_batch = len(built), batch

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

    def stop_now(self) -> None:
        """Claim nothing more, put nothing more on the wire, wait for the replies to what
        is on it at most ``digest.stop_seconds``; every other claim is given back as its
        batch ends."""
        if self.stopped:
            return
        self.stopped = True
        self.recorder.marks.close()
        self.pool.stop(self.settings.digest.stop_seconds)
        in_flight = len(self.recorder.marks.on_wire)
        log.info(
            "stopping: %d in flight, %d given back (the replies to those in flight are waited for %g s at most)",
            in_flight,
            max(0, len(self.leases.held()) - in_flight),
            self.settings.digest.stop_seconds,
        )

    def say_why_it_stopped(self) -> None:
        """One line when the store refused a write: what was answered and not recorded,
        and what was claimed and not given back (both kept to be written later)."""
        self.leftovers.claims.update(self.leases.not_given_back)
        if self.recorder.failure is None and not self.leftovers:
            return
        self.total.unrecorded = len(self.leftovers.answers)
        log.error(
            "delivery stopped: the store refused a write (%s); %s answered and not recorded, %s claimed and never "
            "sent: written when it takes writes again (the answered unknown, should this process end first)",
            said(self.recorder.failure) if self.recorder.failure is not None else "giving claims back",
            plural(len(self.leftovers.answers), "message"),
            plural(len(self.leftovers.claims), "digest"),
        )

    async def _send_batch(self, built: list[BuiltMessage], batch: int) -> DeliverReport:
        """Send a built batch: each message through the gate just before DATA (its
        reader not leaving, its claim still held and marked on the wire)."""
        report = DeliverReport()
        leavers = LeavingLookup(self.factory, {b.row.subscriber_id for b in built})
        self.recorder.marks.expect([b.row for b in built])
        leaving: list[BuiltMessage] = []

        async def send(message: BuiltMessage) -> None:
            verdict = "stopped"  # what held it back, if anything did

            async def wanted() -> bool:
                nonlocal verdict
                if message.row.id in self.leases.lost:
                    verdict = "lost"
                elif await leavers.leaving(message.row.subscriber_id):
                    verdict = "leaving"
                else:
                    try:
                        if await self.recorder.marks.on_wire_now(message.row):
                            return True
                    except StoreUnwritable:
                        return False
                    verdict = "stopped" if self.recorder.marks.closed else "lost"
                return False

            result = await self.pool.send(message.sender, message.recipient, message.data, wanted=wanted)
            if result is not None:
                self.recorder.answer(message.row, result)
            elif verdict == "lost":
                report.lost_lease += 1
            elif verdict == "leaving":
                leaving.append(message)

        try:
            # An exception here is a bug, not an SMTP outcome (those are results): raised.
            await asyncio.gather(*(send(b) for b in built))
        finally:
            leavers.close()
            await self.recorder.flush()
            if leaving and self.recorder.failure is None:
                report.cancelled += await asyncio.to_thread(self._cancel_leavers, leaving)
            if not self.sending_allowed():
                held = self.leases.claims_of(batch)
                unsent = {i: a for i, a in held.items() if (i, a) not in self.recorder.marks.went_out}
                report.given_back += await self.leases.give_back(unsent)
        return report

    def _cancel_leavers(self, left: list[BuiltMessage]) -> int:
        with transaction(self.factory) as session:
            gone = [(b.row, SubscriberStatus.UNSUBSCRIBED) for b in left]
            cancelled = cancel_digests(session, gone, worker=self.worker, now=self.clock())
        self.leases.let_go(b.row.id for b in left)
        return cancelled


async def deliver_now(
    factory: sessionmaker[Session],
    parts: Parts,
    *,
    clock: Clock,
    progress: Callable[[int], None] | None = None,
    stop: asyncio.Event | None = None,
) -> DeliverReport:
    """Open a pool, deliver everything due, close the pool (the CLI's one-shot path)."""
    settings = parts.settings
    builders = Builders(Mailer(parts))
    try:
        async with SmtpPool.of(settings) as pool:
            return await deliver(factory, settings, builders, pool, clock=clock, progress=progress, stop=stop)
    finally:
        builders.close()


def due_count(factory: sessionmaker[Session], now: datetime) -> int:
    from bot.store.queue import count_due

    with factory() as session:
        return count_due(session, now)
