"""The daemon's jobs, one unit each: watching the dumps and feeds, planning,
delivering, asking the language model, reading the inbox, keeping the readers' Zotero
libraries and the store's upkeep (statistics, retention).  ``bot.run.scheduler`` only says when each runs.

Each unit calls service functions in a thread (ingest and planning are CPU and
database work of seconds, so the loop keeps delivering, answering signals and
electing meanwhile), skips a tick that finds its last run still going, and
logs and counts what it did.  Never holds business logic of its own, and never
lets a failure of its work end the process: that is the job's, logged, and the
job runs again at its next tick.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from bot.choose.select import SelectionCache
from bot.delivery.batches import Builders
from bot.delivery.loop import deliver
from bot.delivery.outcomes import Leftovers
from bot.delivery.smtp import SmtpPool
from bot.domain import DeliverReport, IngestResult, SourceStatus
from bot.domain.text import plural
from bot.ingest.watcher import fetch_feeds, scan_folder
from bot.mail.mailer import Mailer
from bot.plan import PlanReport, plan
from bot.plan.retention import remove_expired
from bot.plan.shared import plan_shared, shares_planning
from bot.returns.inbox_reading import read_configured_inbox
from bot.returns.mailboxes import MailboxError
from bot.run.job_logs import delivery_done, log_ingest, log_model_pass, log_planned, log_zotero_pass
from bot.run.job_parts import NOTHING, DaemonParts, Then, said
from bot.store.engine import refresh_statistics, transaction
from bot.store.queue import expire_leases
from bot.subscribers.optin import expire_signups

# The daemon's lines keep the scheduler's logger name, which operators filter by.
log = logging.getLogger("bot.run.scheduler")


class Delivering:
    """Sends what is due, as a task of its own: a big day's delivery takes minutes, and a
    job that waited for it would make APScheduler log every tick as skipped.  A stop
    ends it in seconds (``bot.delivery.loop``: what is on the wire is answered or
    unknown by ``digest.stop_seconds``, the rest given back); ``finish`` waits for that."""

    def __init__(self, parts: DaemonParts) -> None:
        self.parts = parts
        self.builders = Builders(Mailer(parts.loaded))
        self.pool = SmtpPool.of(parts.settings)
        self.running: asyncio.Task[DeliverReport] | None = None
        self.leftovers = Leftovers()  # what the store refused to take, written at the next delivery
        self.taken_over = not parts.sole_worker

    async def take_over(self) -> None:
        """As the only worker (SQLite), end the leases a previous worker left: what it had
        not put on the wire is due again at once, what it had is unknown."""
        parts = self.parts

        def expire() -> tuple[int, int]:
            with transaction(parts.factory) as session:
                return expire_leases(session, parts.clock())

        due, unknown = await asyncio.to_thread(expire)
        if due:
            log.warning(
                "%s claimed and never sent when the last worker stopped; due again",
                plural(due, "digest was", "digests were"),
            )
        if unknown:
            log.warning(
                "%s on the wire when the last worker stopped, unanswered: unknown, never sent again by itself "
                "('history' and 'stats' show them; 'resend' sends one)",
                plural(unknown, "digest was", "digests were"),
            )

    async def deliver(self) -> None:
        """Start delivering what is due, unless a delivery is still running; returns at once.
        The sole worker's first delivery first ends the leases a previous worker left."""
        if self.parts.stop.is_set() or (self.running is not None and not self.running.done()):
            return
        self.running = asyncio.ensure_future(self._deliver())
        self.running.add_done_callback(functools.partial(delivery_done, self.parts.metrics, time.monotonic()))

    async def _deliver(self) -> DeliverReport:
        if not self.taken_over:
            await self.take_over()
            self.taken_over = True
        parts = self.parts
        return await deliver(
            parts.factory,
            parts.settings,
            self.builders,
            self.pool,
            clock=parts.clock,
            worker=parts.worker,
            stop=parts.stop,
            metrics=parts.metrics,
            leftovers=self.leftovers,
        )

    async def finish(self) -> None:
        """Let the delivery under way stop (its sends on the wire answered or unknown, the
        rest given back), then close the connections."""
        if self.running is not None and not self.running.done():
            await asyncio.gather(self.running, return_exceptions=True)
        elif self.parts.stop.is_set():
            log.info("stopping: 0 in flight, 0 given back (no delivery was under way)")
        await self.pool.close()
        self.builders.close()


class Planning:
    """Plans the digests that are due: as the leader, or (PostgreSQL) by helping with the
    slices of the leader's shared pass; asks for a delivery at once when it planned."""

    def __init__(self, parts: DaemonParts) -> None:
        self.parts = parts
        self.lock = parts.planning_lock
        self.selection = SelectionCache()  # filters' verdicts, kept from one pass to the next
        self.last_quiet: tuple[int, int] | None = None  # (nothing new, not due) of the last pass that planned none

    async def plan(self) -> Then:
        """Plan as the leader: on PostgreSQL open a pass that every process shares."""
        parts = self.parts
        if not parts.leads() or self.lock.locked():
            return NOTHING
        async with self.lock:
            if shares_planning(parts.factory):
                report = await asyncio.to_thread(self._plan_shared, opens=True)
            else:
                report = await asyncio.to_thread(
                    plan,
                    parts.factory,
                    parts.settings,
                    parts.rules,
                    now=parts.clock(),
                    cache=self.selection,
                    stop=parts.stop.is_set,
                )
            expired = await asyncio.to_thread(expire_signups, parts.factory, parts.settings, parts.clock())
        if expired:
            log.info("deleted %d unconfirmed sign-ups whose link expired", expired)
        return self._planned(report)

    async def help(self) -> Then:
        """Plan the slices of a shared pass (PostgreSQL) that no other process holds.  The
        leader plans its own passes (``plan``), which a help under way would make skip."""
        if self.parts.stop.is_set() or self.parts.leadership.is_leader or self.lock.locked():
            return NOTHING
        async with self.lock:
            report = await asyncio.to_thread(self._plan_shared, opens=False)
        if report.planned or report.empty or report.not_due:
            return self._planned(report)
        return NOTHING

    def _plan_shared(self, *, opens: bool) -> PlanReport:
        parts = self.parts
        return plan_shared(
            parts.factory,
            parts.settings,
            parts.rules,
            now=parts.clock(),
            by=parts.worker,
            opens=opens,
            cache=self.selection,
            stop=parts.stop.is_set,
        )

    def _planned(self, report: PlanReport) -> Then:
        self.parts.metrics.plan_done(len(report.planned), report.ranker_ranked, report.ranker_skipped)
        quiet = None if report.planned else (report.empty, report.not_due)
        log_planned(report, again=quiet is not None and quiet == self.last_quiet)
        self.last_quiet = quiet
        return Then(after=("deliver",)) if report.planned else NOTHING

    async def finish(self) -> None:
        """A pass under way ends on its own (between batches, once stopping): waited for."""
        async with self.lock:
            pass


class AskingTheModel:
    """Asks the language model for the TL;DRs readers will get and the embeddings of new
    papers (``bot.llm.model_pass``); a stop ends the pass between two requests."""

    def __init__(self, parts: DaemonParts) -> None:
        self.parts = parts
        self.lock = asyncio.Lock()

    async def ask(self) -> None:
        parts = self.parts
        if not parts.leads() or self.lock.locked():
            return
        from bot.llm.model_pass import ask_the_model  # httpx: only a scheduler with a model loads it

        async with self.lock:
            tldrs, embedded = await asyncio.to_thread(
                ask_the_model,
                parts.factory,
                parts.settings,
                now=parts.clock(),
                keep_going=lambda: not parts.stop.is_set(),
            )
        log_model_pass(tldrs, embedded)
        parts.metrics.model_pass_done(tldrs.outcomes(), embedded.outcomes())

    async def finish(self) -> None:
        """A pass under way ends between two requests once stopping: waited for."""
        async with self.lock:
            pass


class Watching:
    """Scans the dump folder and fetches the feeds; when that brought new entries, asks
    for planning at once (an open day's readers get them now, not at the next minute)
    and for the language model beside it."""

    def __init__(self, parts: DaemonParts) -> None:
        self.parts = parts
        self.lock = asyncio.Lock()

    async def watch(self) -> Then:
        if not self.parts.leads() or self.lock.locked():
            return NOTHING
        async with self.lock:
            try:
                results = await self._read()
            except Exception as exc:  # noqa: BLE001 - planning and delivery go on
                log.error("watch failed: %s: %s; the next scan tries again", type(exc).__name__, said(exc))
                log.debug("watch failed", exc_info=exc)
                return NOTHING
        log_ingest(results)
        self.parts.metrics.ingested(results)
        if not any(r.status is SourceStatus.INGESTED and r.new for r in results):
            return NOTHING
        return Then(after=("plan",), beside=("llm",))

    async def finish(self) -> None:
        """A scan under way stops between files once stopping: waited for."""
        async with self.lock:
            pass

    async def _read(self) -> list[IngestResult]:
        parts = self.parts
        results = await asyncio.to_thread(
            scan_folder,
            parts.factory,
            parts.settings.paths.dump_dir,
            quiet_seconds=parts.settings.watch.quiet_seconds,
            rules=parts.rules,
            max_bytes=parts.settings.watch.max_file_bytes,
            stop=parts.stop.is_set,
        )
        if parts.settings.feeds.urls and not parts.stop.is_set():
            results += await asyncio.to_thread(
                fetch_feeds, parts.factory, parts.settings, rules=parts.rules, stop=parts.stop.is_set
            )
        return results


class ReadingTheInbox:
    """Reads ``inbox.url``: bounces, complaints and unsubscribe mails (``bot.returns``)."""

    def __init__(self, parts: DaemonParts, key: bytes) -> None:
        self.parts = parts
        self.key = key
        self.lock = asyncio.Lock()

    async def read(self) -> None:
        parts = self.parts
        if not parts.leads() or self.lock.locked():
            return
        async with self.lock:
            try:
                report = await asyncio.to_thread(read_configured_inbox, parts.factory, parts.settings, self.key)
            except MailboxError as exc:
                log.warning("returned mail not read: %s", exc)
                return
        parts.metrics.inbox_read({kind.value: n for kind, n in report.kinds.items()}, report.left)
        if report.read:
            log.info(
                "inbox: read %s, recorded %d, left %d for a person; %s status",
                plural(report.read, "message"),
                sum(report.kinds.values()),
                report.left,
                plural(len(report.changed), "subscriber changed", "subscribers changed"),
            )

    async def finish(self) -> None:
        async with self.lock:
            pass


class Upkeep:
    """The store's upkeep: fresh statistics for SQLite's query planner, and removing what
    ``database.keep_days`` no longer keeps.  Retention never runs beside planning."""

    def __init__(self, parts: DaemonParts) -> None:
        self.parts = parts

    async def refresh_statistics(self) -> None:
        if self.parts.leads():
            await asyncio.to_thread(refresh_statistics, self.parts.engine)

    async def remove_expired(self) -> None:
        parts, lock = self.parts, self.parts.planning_lock
        if not parts.leads() or lock.locked():
            return
        async with lock:
            report = await asyncio.to_thread(
                remove_expired, parts.factory, parts.settings, now=parts.clock(), stopped=parts.stop.is_set
            )
        if report.digests or report.appearances:
            log.info(
                "removed %s planned before %s (database.keep_days = %d) and %s",
                plural(report.digests, "digest"),
                f"{report.before:%Y-%m-%d %H:%M} UTC",
                parts.settings.database.keep_days,
                plural(report.appearances, "appearance of an old source", "appearances of old sources"),
            )


class KeepingZotero:
    """The readers' Zotero libraries (``bot.zotero.zotero_pass``): the "Save to Zotero"
    asks journaled, the saves written, the libraries due synced; a stop ends the pass
    between two readers."""

    def __init__(self, parts: DaemonParts) -> None:
        self.parts = parts
        self.lock = asyncio.Lock()

    async def keep(self) -> None:
        parts = self.parts
        if not parts.leads() or self.lock.locked():
            return
        from bot.zotero.zotero_pass import zotero_pass  # httpx: only a pass with a connected library opens it

        async with self.lock:
            done = await asyncio.to_thread(
                zotero_pass,
                parts.factory,
                parts.settings,
                parts.clock(),
                keep_going=lambda: not parts.stop.is_set(),
            )
        log_zotero_pass(done)

    async def finish(self) -> None:
        async with self.lock:
            pass
