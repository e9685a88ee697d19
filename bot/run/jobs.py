"""The daemon's jobs, one unit each: watching the dumps and feeds, planning,
delivering, asking the language model, reading the inbox and the store's upkeep
(statistics, retention).  ``bot.run.scheduler`` only says when each runs.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.select import SelectionCache
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.delivery.batches import Builders
from bot.delivery.loop import deliver
from bot.delivery.outcomes import Leftovers
from bot.delivery.smtp import SmtpPool
from bot.domain import DeliverReport, IngestResult, SourceStatus
from bot.domain.text import plural
from bot.ingest.watcher import fetch_feeds, scan_folder
from bot.mail.mailer import Mailer
from bot.mail.parts import Parts
from bot.metrics import Metrics
from bot.plan import PlanReport, plan
from bot.plan.retention import remove_expired
from bot.plan.shared import plan_shared, shares_planning
from bot.returns.inbox_reading import read_configured_inbox
from bot.returns.mailboxes import MailboxError
from bot.run.job_logs import delivery_done, log_ingest, log_model_pass, log_planned
from bot.run.roles import Leadership
from bot.store.engine import refresh_statistics, transaction
from bot.store.queue import expire_leases
from bot.subscribers.optin import expire_signups

# The daemon's lines keep the scheduler's logger name, which operators filter by.
log = logging.getLogger("bot.run.scheduler")


def guarded(name: str, job: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
    """*job* as the daemon runs it: whatever it raises is logged in one line (the
    traceback at debug level) and the job runs again at its next tick; the daemon,
    its other jobs and the endpoint's unsubscribe journal go on."""

    async def run() -> None:
        try:
            await job()
        except Exception as exc:  # noqa: BLE001 - one job's failure, never the daemon's
            log.error("%s failed: %s: %s; it runs again at its next tick", name, type(exc).__name__, said(exc))
            log.debug("%s failed", name, exc_info=exc)

    return run


def said(exc: BaseException) -> str:
    """An exception's message on one line, cut to what a log line holds."""
    return " ".join(str(exc).split())[:300]


@dataclass(frozen=True)
class DaemonParts:
    """What every job of one daemon process shares: the store, the settings, the clock,
    the stop signal, the metrics and whether this process leads."""

    factory: sessionmaker[Session]
    engine: Engine
    loaded: Parts  # the settings and what the process loaded of their files
    clock: Callable[[], datetime]
    stop: asyncio.Event
    leadership: Leadership
    metrics: Metrics
    worker: str

    @property
    def settings(self) -> Settings:
        return self.loaded.settings

    @property
    def rules(self) -> TagRules:
        return self.loaded.rules

    def leads(self) -> bool:
        """Whether a leader's job may run now: not stopping, and still the leader."""
        return not self.stop.is_set() and self.leadership.holds()


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
        """Start delivering what is due, unless a delivery is still running; returns at once."""
        if self.parts.stop.is_set() or (self.running is not None and not self.running.done()):
            return
        parts = self.parts
        self.running = asyncio.ensure_future(
            deliver(
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
        )
        self.running.add_done_callback(functools.partial(delivery_done, parts.metrics, time.monotonic()))

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
    slices of the leader's shared pass; delivers at once what it planned."""

    def __init__(self, parts: DaemonParts, delivering: Delivering | None) -> None:
        self.parts = parts
        self.delivering = delivering
        self.lock = asyncio.Lock()
        self.selection = SelectionCache()  # filters' verdicts, kept from one pass to the next

    async def plan(self) -> None:
        """Plan as the leader: on PostgreSQL open a pass that every process shares."""
        parts = self.parts
        if not parts.leads() or self.lock.locked():
            return
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
        await self._planned(report)

    async def help(self) -> None:
        """Plan the slices of a shared pass (PostgreSQL) that no other process holds.  The
        leader plans its own passes (``plan``), which a help under way would make skip."""
        if self.parts.stop.is_set() or self.parts.leadership.is_leader or self.lock.locked():
            return
        async with self.lock:
            report = await asyncio.to_thread(self._plan_shared, opens=False)
        if report.planned or report.empty or report.not_due:
            await self._planned(report)

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

    async def _planned(self, report: PlanReport) -> None:
        self.parts.metrics.plan_done(len(report.planned), report.ranker_ranked, report.ranker_skipped)
        log_planned(report)
        if report.planned and self.delivering is not None:
            await self.delivering.deliver()


class AskingTheModel:
    """Asks the language model for the TL;DRs readers will get and the embeddings of new
    papers (``bot.llm.model_pass``); a stop ends the pass between two requests."""

    def __init__(self, parts: DaemonParts) -> None:
        self.parts = parts
        self.lock = asyncio.Lock()
        self._after_ingest: asyncio.Future[None] | None = None

    def soon(self) -> None:
        """Ask beside the planning a new dump starts, never awaited by it."""
        self._after_ingest = asyncio.ensure_future(guarded("the language model", self.ask)())

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


class Watching:
    """Scans the dump folder and fetches the feeds; when that brought new entries, plans
    at once (an open day's readers get them now, not at the next minute)."""

    def __init__(self, parts: DaemonParts, planning: Planning, model: AskingTheModel | None) -> None:
        self.parts = parts
        self.planning = planning
        self.model = model
        self.lock = asyncio.Lock()

    async def watch(self) -> bool:
        """Returns whether it planned."""
        if not self.parts.leads() or self.lock.locked():
            return False
        async with self.lock:
            try:
                results = await self._read()
            except Exception as exc:  # noqa: BLE001 - planning and delivery go on
                log.error("watch failed: %s: %s; the next scan tries again", type(exc).__name__, said(exc))
                log.debug("watch failed", exc_info=exc)
                return False
        log_ingest(results)
        self.parts.metrics.ingested(results)
        if not any(r.status is SourceStatus.INGESTED and r.new for r in results):
            return False
        if self.model is not None:
            self.model.soon()
        await self.planning.plan()
        return True

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


class Upkeep:
    """The store's upkeep: fresh statistics for SQLite's query planner, and removing what
    ``database.keep_days`` no longer keeps.  Retention never runs beside planning."""

    def __init__(self, parts: DaemonParts, planning: Planning) -> None:
        self.parts = parts
        self.planning = planning

    async def refresh_statistics(self) -> None:
        if self.parts.leads():
            await asyncio.to_thread(refresh_statistics, self.parts.engine)

    async def remove_expired(self) -> None:
        parts, lock = self.parts, self.planning.lock
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
