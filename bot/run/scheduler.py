"""The daemon: APScheduler 3.11's AsyncIOScheduler running the jobs of
``bot.run.jobs``.  Jobs are declared in code, in memory (the database, not the
job store, says what is due): watch the dump folder and feeds every
``watch.interval_seconds``, plan every minute, deliver every few seconds.

Roles: the scheduler role (watch + plan) runs only while this process is the
elected leader (``roles.Leadership``; standbys retry every few seconds); the
worker role (deliver) runs in as many processes as the database allows.  On
PostgreSQL every process, leader or not, plans slices of the leader's passes
(``bot.plan.shared``).

SIGTERM/SIGINT: stop planning and claiming at once, let what is on the wire be
answered (at most ``digest.stop_seconds``; unknown after that), give back every other
claim, exit 0; a second one exits at once (130), leaving what is on the wire to the
crash window docs/operating.md names.  Only says when each job runs; never does a job's
work.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot import __version__
from bot.delivery.loop import worker_name
from bot.domain.routes import HEALTH, METRICS
from bot.mail.parts import Parts
from bot.metrics import Metrics
from bot.plan.shared import shares_planning
from bot.run.channel_job import PostingToChannels
from bot.run.exporter import Exporter
from bot.run.job_parts import DaemonParts, Then, guarded
from bot.run.jobs import AskingTheModel, Delivering, KeepingZotero, Planning, ReadingTheInbox, Upkeep, Watching
from bot.run.roles import Leadership, claim_sqlite_worker
from bot.run.stopping import StopSignals

log = logging.getLogger(__name__)

DELIVER_EVERY = timedelta(seconds=5)
HELP_EVERY = timedelta(seconds=2)  # how soon a process joins a shared planning pass (PostgreSQL)
STATISTICS_EVERY = timedelta(hours=6)  # the store grows by a day's digests between two
STATISTICS_FIRST = timedelta(seconds=30)
ELECTION_EVERY_SECONDS = 3
RETENTION_EVERY = timedelta(hours=1)  # a day's digests are removed within the hour they expire
RETENTION_FIRST = timedelta(minutes=2)
MODEL_EVERY = timedelta(seconds=120)  # a dump's entries get their TL;DRs within minutes, before the send hour
CHANNELS_EVERY = timedelta(seconds=10)  # a part a service asked to wait for goes soon after
ZOTERO_EVERY = timedelta(minutes=1)  # a save reaches Zotero within a minute; a library syncs when due
JOB_DEFAULTS = {"coalesce": True, "max_instances": 1, "misfire_grace_time": 3600}


@dataclass(frozen=True)
class Job:
    """One line of the daemon's job table: APScheduler's id, the name its log lines
    use, what it runs, how often, and when first (None: an interval from now)."""

    id: str
    name: str
    run: Callable[[], Awaitable[Then | None]]
    every: timedelta
    first: datetime | None


def utcnow() -> datetime:
    return datetime.now(UTC)


class Daemon:
    """One process running its roles' jobs until told to stop: it holds the jobs
    (``bot.run.jobs``), elects, and says when each runs."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        loaded: Parts,
        *,
        engine: Engine,
        clock: Callable[[], datetime] = utcnow,
        plan_jobs: bool = True,
        deliver_jobs: bool = True,
    ) -> None:
        settings = self.settings = loaded.settings
        self.plan_jobs = plan_jobs
        self.deliver_jobs = deliver_jobs
        # On SQLite a second worker is refused here, before anything starts.
        self.worker_lock = claim_sqlite_worker(engine) if deliver_jobs else None
        self._beside: set[asyncio.Future[list[str]]] = set()
        self._jobs: dict[str, Job] | None = None
        self.parts = DaemonParts(
            factory=factory,
            engine=engine,
            loaded=loaded.check(),
            clock=clock,
            stop=asyncio.Event(),
            leadership=Leadership(engine),
            metrics=Metrics(factory, clock),
            worker=worker_name(),
            sole_worker=self.worker_lock is not None,
            planning_lock=asyncio.Lock(),
        )
        self.delivering = Delivering(self.parts)
        self.planning = Planning(self.parts)
        self.model = AskingTheModel(self.parts) if settings.llm.enabled else None
        self.watching = Watching(self.parts)
        self.inbox = ReadingTheInbox(self.parts, loaded.key)
        self.upkeep = Upkeep(self.parts)
        self.zotero = KeepingZotero(self.parts)
        self.channels = PostingToChannels(self.parts)
        self.exporter: Exporter | None = None
        if settings.metrics.listen_port:  # bound here: a port in use stops the start, not a thread
            self.exporter = Exporter(
                self.parts.metrics,
                settings.metrics.listen_host,
                settings.metrics.listen_port,
                jobs=self.fresh_jobs,
                stale_after=settings.metrics.stale_after_minutes * 60,
            )

    @property
    def leadership(self) -> Leadership:
        return self.parts.leadership

    @property
    def stop(self) -> asyncio.Event:
        return self.parts.stop

    def fresh_jobs(self) -> list[str]:
        """The jobs /healthz holds this process to: planning while it leads, delivery
        when it is a worker."""
        jobs = ["plan"] if self.plan_jobs and self.leadership.is_leader else []
        return jobs + (["deliver"] if self.deliver_jobs else [])

    async def elect(self) -> None:
        """Become the scheduler if nobody is; ingest, plan and read the inbox at once
        when we just did (not an interval later), in that order: a day planned a moment
        before its dumps are read would be recorded as empty."""
        if self.stop.is_set():
            return
        was_leader = self.leadership.is_leader
        if self.leadership.try_acquire() and not was_leader:
            log.info("became the scheduler (leader) of this database")
            if "plan" not in await self.run_job("watch"):
                await self.run_job("plan")
            await self.run_job("inbox")

    async def run_job(self, job_id: str) -> list[str]:
        """Run the job *job_id* of this process's table now, then what it asks for after it
        (each awaited, in order) and beside it (started, not awaited); the ids run, in
        order.  An id the table does not hold (this process's roles do not run it) is
        not run."""
        job = self._table().get(job_id)
        if job is None:
            return []
        then = await guarded(job.name, job.run)()
        for beside in then.beside:
            started = asyncio.ensure_future(self.run_job(beside))
            self._beside.add(started)
            started.add_done_callback(self._beside.discard)
        ran = [job_id]
        for after in then.after:
            ran += await self.run_job(after)
        return ran

    def _table(self) -> dict[str, Job]:
        if self._jobs is None:
            self._jobs = {job.id: job for job in self.jobs(utcnow())}
        return self._jobs

    def jobs(self, now: datetime) -> list[Job]:
        """The jobs this process's roles run, with when each runs first and how often."""
        settings, soon = self.settings, now + timedelta(minutes=1)
        table: list[Job] = []
        if self.plan_jobs:
            interval = timedelta(seconds=settings.watch.interval_seconds)
            table += [
                Job("elect", "election", self.elect, timedelta(seconds=ELECTION_EVERY_SECONDS), None),
                Job("watch", "watch", self.watching.watch, interval, now + interval),
                Job("plan", "planning", self.planning.plan, timedelta(minutes=1), soon),
                Job(
                    "statistics", "statistics", self.upkeep.refresh_statistics, STATISTICS_EVERY, now + STATISTICS_FIRST
                ),
                Job("retention", "retention", self.upkeep.remove_expired, RETENTION_EVERY, now + RETENTION_FIRST),
                Job("zotero", "the Zotero libraries", self.zotero.keep, ZOTERO_EVERY, soon),
            ]
            if self.model is not None:
                table.append(Job("llm", "the language model", self.model.ask, MODEL_EVERY, None))
            if settings.inbox.url:
                every = timedelta(minutes=settings.inbox.interval_minutes)
                table.append(Job("inbox", "reading the inbox", self.inbox.read, every, None))
        if shares_planning(self.parts.factory):
            table.append(Job("help", "planning", self.planning.help, HELP_EVERY, now))
        if self.deliver_jobs:
            table.append(Job("deliver", "delivery", self.delivering.deliver, DELIVER_EVERY, now))
            # Not at once: a worker's first seconds are its mail's (and a stop then has less to wait for).
            table.append(Job("channels", "the channels", self.channels.post, CHANNELS_EVERY, None))
        return table

    def _scheduler(self, now: datetime) -> AsyncIOScheduler:
        """The jobs this process's roles run, not yet started."""
        scheduler = AsyncIOScheduler(timezone=UTC, job_defaults=JOB_DEFAULTS)
        for job in self.jobs(now):
            first = {} if job.first is None else {"next_run_time": job.first}
            trigger = IntervalTrigger(seconds=job.every.total_seconds())
            scheduler.add_job(functools.partial(self.run_job, job.id), trigger, id=job.id, **first)
        return scheduler

    def _announce(self) -> None:
        log.info(
            "digestbot %s started as %s (worker %s): database %s, SMTP %s:%d (tls %s); SIGTERM or Ctrl-C stops it",
            __version__,
            " and ".join(role for role, on in (("scheduler", self.plan_jobs), ("worker", self.deliver_jobs)) if on),
            self.parts.worker,
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
            where = f"http://{host}:{self.exporter.port}"
            log.info("metrics on %s, health on %s", METRICS.url(where), HEALTH.path())

    async def run(self) -> None:
        with StopSignals(self.stop, stop_seconds=self.settings.digest.stop_seconds):
            await self._run()

    async def _run(self) -> None:
        scheduler = self._scheduler(utcnow())
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
                await self.run_job("elect")
                if not self.leadership.is_leader:
                    log.info("another scheduler is the leader; standing by")
            await self.stop.wait()
        finally:
            # A job still watching, planning or reading ends on its own (a scan stops
            # between files): wait for it, then shut down.  The shutdown cancels the jobs
            # it finds running, and APScheduler logs a cancelled job as a traceback.
            scheduler.pause()
            for job in (self.watching, self.planning, self.inbox, self.model, self.zotero, self.channels):
                if job is not None:
                    await job.finish()
            scheduler.shutdown(wait=False)
            await self.delivering.finish()  # in-flight sends finish
            if self.exporter is not None:
                self.exporter.stop()
            self.leadership.release()
            if self.worker_lock is not None:
                self.worker_lock.release()
            log.info("stopped")
