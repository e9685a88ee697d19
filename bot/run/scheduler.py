"""The daemon: APScheduler 3.11's AsyncIOScheduler calling the same service
functions as the CLI.  Jobs are declared in code, in memory (the database, not
the job store, says what is due): watch the dump folder and feeds every
``watch.interval_seconds``, plan every minute, deliver every few seconds.

Roles: the scheduler role (watch + plan) runs only while this process is the
elected leader (``roles.Leadership``; standbys retry every few seconds); the
worker role (deliver) runs in as many processes as the database allows.  On
PostgreSQL every process, leader or not, plans slices of the leader's passes
(``bot.plan.shared``).

SIGTERM/SIGINT: stop planning and claiming, let the sends in flight finish and
be recorded, exit 0.  Never holds business logic of its own.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot import __version__
from bot.choose.select import SelectionCache
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.delivery.batches import Builders
from bot.delivery.loop import deliver, worker_name
from bot.delivery.smtp import SmtpPool
from bot.domain import DeliverReport, IngestResult, SourceStatus
from bot.domain.text import plural
from bot.ingest.watcher import fetch_feeds, scan_folder
from bot.mail.mailer import Mailer
from bot.metrics import Metrics
from bot.plan import PlanReport, plan
from bot.plan.retention import remove_expired
from bot.plan.shared import plan_shared, shares_planning
from bot.returns.mailboxes import MailboxError
from bot.returns.service import read_configured_inbox
from bot.run.exporter import Exporter
from bot.run.job_logs import delivery_done, log_ingest, log_model_pass, log_planned
from bot.run.roles import Leadership, claim_sqlite_worker
from bot.store.digests import expire_leases
from bot.store.engine import refresh_statistics, transaction
from bot.subscribers.optin import expire_signups

log = logging.getLogger(__name__)

DELIVER_EVERY_SECONDS = 5
HELP_EVERY_SECONDS = 2  # how soon a process joins a shared planning pass (PostgreSQL)
STATISTICS_EVERY_HOURS = 6  # the store grows by a day's digests between two
ELECTION_EVERY_SECONDS = 3
RETENTION_EVERY_HOURS = 1  # a day's digests are removed within the hour they expire
MODEL_EVERY_SECONDS = 120  # a dump's entries get their TL;DRs within minutes, before the send hour
JOB_DEFAULTS = {"coalesce": True, "max_instances": 1, "misfire_grace_time": 3600}


def utcnow() -> datetime:
    return datetime.now(UTC)


def _guarded(name: str, job: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
    """*job* as the daemon runs it: whatever it raises is logged in one line (the
    traceback at debug level) and the job runs again at its next tick; the daemon,
    its other jobs and the endpoint's unsubscribe journal go on."""

    async def run() -> None:
        try:
            await job()
        except Exception as exc:  # noqa: BLE001 - one job's failure, never the daemon's
            log.error("%s failed: %s: %s; it runs again at its next tick", name, type(exc).__name__, _said(exc))
            log.debug("%s failed", name, exc_info=exc)

    return run


def _said(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


class Daemon:
    """One process doing watch + plan + deliver until told to stop."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        rules: TagRules,
        *,
        engine: Engine,
        clock: Callable[[], datetime] = utcnow,
        plan_jobs: bool = True,
        deliver_jobs: bool = True,
    ) -> None:
        self.factory = factory
        self.engine = engine
        self.leadership = Leadership(engine)
        # On SQLite a second worker is refused here, before anything starts.
        self.worker_lock = claim_sqlite_worker(engine) if deliver_jobs else None
        self.settings = settings
        self.rules = rules
        self.clock = clock
        self.plan_jobs = plan_jobs
        self.deliver_jobs = deliver_jobs
        self.stop = asyncio.Event()
        self.selection = SelectionCache()  # filters' verdicts, kept from one planning pass to the next
        self.worker = worker_name()
        self.builders = Builders(Mailer(settings))
        self.pool = SmtpPool.of(settings)
        self._delivering: asyncio.Task[DeliverReport] | None = None
        self.metrics = Metrics(factory, clock)
        self.exporter: Exporter | None = None
        if settings.metrics.listen_port:  # bound here: a port in use stops the start, not a thread
            self.exporter = Exporter(
                self.metrics,
                settings.metrics.listen_host,
                settings.metrics.listen_port,
                jobs=self.fresh_jobs,
                stale_after=settings.metrics.stale_after_minutes * 60,
            )
        # A tick that finds the last scan or planning pass still running skips.
        self._watching = asyncio.Lock()
        self._planning = asyncio.Lock()
        self._reading = asyncio.Lock()
        self._writing_tldrs = asyncio.Lock()
        self._tldrs_after_ingest: asyncio.Future[None] | None = None

    def fresh_jobs(self) -> list[str]:
        """The jobs /healthz holds this process to: planning while it leads, delivery
        when it is a worker."""
        jobs = ["plan"] if self.plan_jobs and self.leadership.is_leader else []
        return jobs + (["deliver"] if self.deliver_jobs else [])

    async def elect(self) -> None:
        """Become the scheduler if nobody is; ingest, plan and read the inbox at once
        when we just did (not an interval later)."""
        if self.stop.is_set():
            return
        was_leader = self.leadership.is_leader
        if self.leadership.try_acquire() and not was_leader:
            log.info("became the scheduler (leader) of this database")
            if not await self.watch():
                await self.plan()
            if self.settings.inbox.url:
                await self.read_inbox()

    # Ingest and planning are CPU and database work of seconds: they run in a thread,
    # so the loop keeps delivering, answering signals and electing meanwhile.
    async def watch(self) -> bool:
        """Scan the folder and fetch the feeds; when that brought new entries, plan at
        once (an open day's subscribers get them now, not at the next minute).
        Returns whether it planned."""
        if self.stop.is_set() or not self.leadership.holds() or self._watching.locked():
            return False
        async with self._watching:
            try:
                results = await self._watch()
            except Exception as exc:  # noqa: BLE001 - planning and delivery go on
                log.error("watch failed: %s: %s; the next scan tries again", type(exc).__name__, _said(exc))
                log.debug("watch failed", exc_info=exc)
                return False
        log_ingest(results)
        self.metrics.ingested(results)
        if not any(r.status is SourceStatus.INGESTED and r.new for r in results):
            return False
        if self.settings.llm.enabled:  # asked beside planning, never awaited by it
            self._tldrs_after_ingest = asyncio.ensure_future(_guarded("the language model", self.ask_the_model)())
        await self.plan()
        return True

    async def _watch(self) -> list[IngestResult]:
        results = await asyncio.to_thread(
            scan_folder,
            self.factory,
            self.settings.paths.dump_dir,
            quiet_seconds=self.settings.watch.quiet_seconds,
            rules=self.rules,
            max_bytes=self.settings.watch.max_file_bytes,
            stop=self.stop.is_set,
        )
        if self.settings.feeds.urls and not self.stop.is_set():
            results += await asyncio.to_thread(fetch_feeds, self.factory, self.settings, rules=self.rules)
        return results

    async def plan(self) -> None:
        """Plan as the leader: on PostgreSQL open a pass that every process shares."""
        if self.stop.is_set() or not self.leadership.holds() or self._planning.locked():
            return
        async with self._planning:
            if shares_planning(self.factory):
                report = await asyncio.to_thread(self._plan_shared, opens=True)
            else:
                report = await asyncio.to_thread(
                    plan, self.factory, self.settings, self.rules, now=self.clock(), cache=self.selection
                )
            expired = await asyncio.to_thread(expire_signups, self.factory, self.settings, self.clock())
        if expired:
            log.info("deleted %d unconfirmed sign-ups whose link expired", expired)
        await self._planned(report)

    async def help_plan(self) -> None:
        """Plan the slices of a shared pass (PostgreSQL) that no other process holds.  The
        leader plans its own passes (``plan``), which a help under way would make skip."""
        if self.stop.is_set() or self.leadership.is_leader or self._planning.locked():
            return
        async with self._planning:
            report = await asyncio.to_thread(self._plan_shared, opens=False)
        if report.planned or report.empty or report.not_due:
            await self._planned(report)

    def _plan_shared(self, *, opens: bool) -> PlanReport:
        return plan_shared(
            self.factory,
            self.settings,
            self.rules,
            now=self.clock(),
            by=self.worker,
            opens=opens,
            cache=self.selection,
            stop=self.stop.is_set,
        )

    async def _planned(self, report: PlanReport) -> None:
        self.metrics.plan_done(len(report.planned), report.ranker_ranked, report.ranker_skipped)
        log_planned(report)
        if report.planned and self.deliver_jobs:
            await self.deliver()

    async def ask_the_model(self) -> None:
        """Ask the language model for the TL;DRs readers will get and the embeddings of new
        papers (``bot.llm.service``), in a thread; a stop ends the pass between two requests."""
        if self.stop.is_set() or not self.leadership.holds() or self._writing_tldrs.locked():
            return
        from bot.llm.service import ask_the_model  # httpx: only a scheduler with a model loads it

        async with self._writing_tldrs:
            tldrs, embedded = await asyncio.to_thread(
                ask_the_model, self.factory, self.settings, now=self.clock(), keep_going=lambda: not self.stop.is_set()
            )
        log_model_pass(tldrs, embedded)
        self.metrics.model_pass_done(tldrs.outcomes(), embedded.outcomes())

    async def refresh_statistics(self) -> None:
        """Give SQLite's query planner fresh statistics (``store.engine.refresh_statistics``)."""
        if self.stop.is_set() or not self.leadership.holds():
            return
        await asyncio.to_thread(refresh_statistics, self.engine)

    async def remove_expired(self) -> None:
        """Remove what ``database.keep_days`` no longer keeps (``bot.plan.retention``)."""
        if self.stop.is_set() or not self.leadership.holds() or self._planning.locked():
            return
        async with self._planning:
            report = await asyncio.to_thread(
                remove_expired, self.factory, self.settings, now=self.clock(), stopped=self.stop.is_set
            )
        if report.digests or report.appearances:
            log.info(
                "removed %s planned before %s (database.keep_days = %d) and %s",
                plural(report.digests, "digest"),
                f"{report.before:%Y-%m-%d %H:%M} UTC",
                self.settings.database.keep_days,
                plural(report.appearances, "appearance of an old source", "appearances of old sources"),
            )

    async def read_inbox(self) -> None:
        """Read ``inbox.url``: bounces, complaints and unsubscribe mails (``bot.returns``)."""
        if self.stop.is_set() or not self.leadership.holds() or self._reading.locked():
            return
        async with self._reading:
            try:
                report = await asyncio.to_thread(
                    read_configured_inbox, self.factory, self.settings, self.builders.mailer.key
                )
            except MailboxError as exc:
                log.warning("returned mail not read: %s", exc)
                return
        self.metrics.inbox_read({kind.value: n for kind, n in report.kinds.items()}, report.left)
        if report.read:
            log.info(
                "inbox: read %s, recorded %d, left %d for a person; %s status",
                plural(report.read, "message"),
                sum(report.kinds.values()),
                report.left,
                plural(len(report.changed), "subscriber changed", "subscribers changed"),
            )

    async def deliver(self) -> None:
        """Start delivering what is due, unless a delivery is still running.

        Returns at once: a delivery of a big day takes minutes, and a job that
        waited for it would make APScheduler log every tick as skipped.  The
        delivery is a task of its own, so shutting the scheduler down never
        cancels sends in flight; run() waits for them instead."""
        if (
            not self.deliver_jobs
            or self.stop.is_set()
            or (self._delivering is not None and not self._delivering.done())
        ):
            return
        self._delivering = asyncio.ensure_future(
            deliver(
                self.factory,
                self.settings,
                self.builders,
                self.pool,
                clock=self.clock,
                worker=self.worker,
                stop=self.stop,
                metrics=self.metrics,
            )
        )
        self._delivering.add_done_callback(functools.partial(delivery_done, self.metrics, time.monotonic()))

    def _scheduler(self, now: datetime) -> AsyncIOScheduler:
        """The jobs this process's roles run, not yet started."""
        scheduler = AsyncIOScheduler(timezone=UTC, job_defaults=JOB_DEFAULTS)
        if self.plan_jobs:
            scheduler.add_job(
                _guarded("election", self.elect), IntervalTrigger(seconds=ELECTION_EVERY_SECONDS), id="elect"
            )
            interval = self.settings.watch.interval_seconds
            scheduler.add_job(
                _guarded("watch", self.watch),
                IntervalTrigger(seconds=interval),
                id="watch",
                next_run_time=now + timedelta(seconds=interval),
            )
            scheduler.add_job(
                _guarded("planning", self.plan),
                IntervalTrigger(minutes=1),
                id="plan",
                next_run_time=now + timedelta(minutes=1),
            )
            scheduler.add_job(
                _guarded("statistics", self.refresh_statistics),
                IntervalTrigger(hours=STATISTICS_EVERY_HOURS),
                id="statistics",
                next_run_time=now + timedelta(seconds=30),
            )
            scheduler.add_job(
                _guarded("retention", self.remove_expired),
                IntervalTrigger(hours=RETENTION_EVERY_HOURS),
                id="retention",
                next_run_time=now + timedelta(minutes=2),
            )
            if self.settings.llm.enabled:
                every = IntervalTrigger(seconds=MODEL_EVERY_SECONDS)
                scheduler.add_job(_guarded("the language model", self.ask_the_model), every, id="llm")
            if self.settings.inbox.url:
                every = timedelta(minutes=self.settings.inbox.interval_minutes)
                scheduler.add_job(
                    _guarded("reading the inbox", self.read_inbox),
                    IntervalTrigger(seconds=every.total_seconds()),
                    id="inbox",
                )
        if shares_planning(self.factory):
            scheduler.add_job(
                _guarded("planning", self.help_plan),
                IntervalTrigger(seconds=HELP_EVERY_SECONDS),
                id="help",
                next_run_time=now,
            )
        if self.deliver_jobs:
            scheduler.add_job(
                _guarded("delivery", self.deliver),
                IntervalTrigger(seconds=DELIVER_EVERY_SECONDS),
                id="deliver",
                next_run_time=now,
            )
        return scheduler

    def _announce(self) -> None:
        log.info(
            "digestbot %s started as %s (worker %s): database %s, SMTP %s:%d (tls %s); SIGTERM or Ctrl-C stops it",
            __version__,
            " and ".join(role for role, on in (("scheduler", self.plan_jobs), ("worker", self.deliver_jobs)) if on),
            self.worker,
            self.settings.redacted()["database"]["effective_url"],
            self.settings.smtp.host,
            self.settings.smtp.port,
            self.settings.smtp.tls,
        )
        if self.plan_jobs and self.settings.inbox.url:
            inbox = self.settings.inbox
            log.info("returned mail read from %s every %d minutes", inbox.url, inbox.interval_minutes)
        if self.exporter is not None:
            host = self.settings.metrics.listen_host
            log.info("metrics on http://%s:%d/metrics, health on /healthz", host, self.exporter.port)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        now = utcnow()
        scheduler = self._scheduler(now)
        if self.worker_lock is not None:
            # The only SQLite worker: whatever is still "sending" was left by a
            # previous process that died; it need not wait for its leases to run out.
            with transaction(self.factory) as session:
                taken_back = expire_leases(session, now)
            if taken_back:
                log.warning(
                    "%s being sent when the last worker stopped; sending again",
                    plural(taken_back, "digest was", "digests were"),
                )
        scheduler.start()
        if self.exporter is not None:
            self.exporter.start()
        self._announce()
        try:
            if self.plan_jobs:
                # Winning the election ingests what is waiting and plans at once (in
                # that order: a day planned a moment before its dumps are read would
                # be recorded as empty), while digests already due go out.  Standbys
                # keep trying every few seconds.
                await _guarded("election", self.elect)()
                if not self.leadership.is_leader:
                    log.info("another scheduler is the leader; standing by")
            await self.stop.wait()
        finally:
            # A job still watching, planning or reading ends on its own (a scan stops
            # between files): wait for it, then shut down.  The shutdown cancels the jobs
            # it finds running, and APScheduler logs a cancelled job as a traceback.
            scheduler.pause()
            for running in (self._watching, self._planning, self._reading):
                async with running:
                    pass
            scheduler.shutdown(wait=False)
            if self._delivering is not None:
                await asyncio.gather(self._delivering, return_exceptions=True)  # in-flight sends finish
            await self.pool.close()
            self.builders.close()
            if self.exporter is not None:
                self.exporter.stop()
            self.leadership.release()
            if self.worker_lock is not None:
                self.worker_lock.release()
            log.info("stopped")
