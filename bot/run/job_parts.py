"""The daemon's jobs, what they share: the process's parts (``DaemonParts``), how a job
asks for what follows it (``Then``) and how each runs guarded (a failure is its own,
logged in one line).  Never does a job's work and never says when one runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.mail.parts import Parts
from bot.metrics import Metrics
from bot.run.roles import Leadership

# The daemon's lines keep the scheduler's logger name, which operators filter by.
log = logging.getLogger("bot.run.scheduler")


@dataclass(frozen=True, slots=True)
class Then:
    """What a job asks the scheduler to run at once after it, by job id: *after*, each
    awaited in order; *beside*, started and never awaited.  A job never calls another."""

    after: tuple[str, ...] = ()
    beside: tuple[str, ...] = ()


NOTHING = Then()


def guarded(name: str, job: Callable[[], Awaitable[Then | None]]) -> Callable[[], Awaitable[Then]]:
    """*job* as the daemon runs it: whatever it raises is logged in one line (the
    traceback at debug level) and the job runs again at its next tick; the daemon,
    its other jobs and the endpoint's unsubscribe journal go on."""

    async def run() -> Then:
        try:
            return await job() or NOTHING
        except Exception as exc:  # noqa: BLE001 - one job's failure, never the daemon's
            log.error("%s failed: %s: %s; it runs again at its next tick", name, type(exc).__name__, said(exc))
            log.debug("%s failed", name, exc_info=exc)
            return NOTHING

    return run


def said(exc: BaseException) -> str:
    """An exception's message on one line, cut to what a log line holds."""
    return " ".join(str(exc).split())[:300]


@dataclass(frozen=True)
class DaemonParts:
    """What every job of one daemon process shares: the store, the settings, the clock,
    the stop signal, the metrics, whether this process leads and is the only worker, and
    the lock that keeps retention from running beside planning."""

    factory: sessionmaker[Session]
    engine: Engine
    loaded: Parts  # the settings and what the process loaded of their files
    clock: Callable[[], datetime]
    stop: asyncio.Event
    leadership: Leadership
    metrics: Metrics
    worker: str
    sole_worker: bool  # SQLite's one worker: the leases a previous one left are its to end
    planning_lock: asyncio.Lock

    @property
    def settings(self) -> Settings:
        return self.loaded.settings

    @property
    def rules(self) -> TagRules:
        return self.loaded.rules

    def leads(self) -> bool:
        """Whether a leader's job may run now: not stopping, and still the leader."""
        return not self.stop.is_set() and self.leadership.holds()
