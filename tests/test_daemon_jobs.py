"""The daemon's jobs one by one (``bot.run.jobs``), each on a real SQLite store, and the
job table the scheduler reads (``Daemon.jobs``): who runs what, and that a job skips,
fails and stops as its unit says, without the daemon around it."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import DigestState
from bot.mail.parts import Parts
from bot.run.job_parts import NOTHING, guarded
from bot.run.scheduler import Daemon
from bot.store.engine import make_engine, sessions
from bot.store.schema import Digest, Source
from bot.tools.sink import Fault, Sink, SinkHandler
from bot.unsubscribes import close_journal
from tests.conftest import ROOT, SEEDS, copy_aged
from tests.helpers import queue_digests, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")


@pytest.fixture
def store(migrated_sqlite: Path, tmp_path: Path) -> Iterator[Engine]:
    """A migrated SQLite store: the units schedule work, which no backend changes."""
    shutil.copyfile(migrated_sqlite, tmp_path / "store.sqlite3")
    engine = make_engine(f"sqlite:///{tmp_path / 'store.sqlite3'}")
    yield engine
    close_journal(engine.url.render_as_string(hide_password=False))
    engine.dispose()


def daemon_of(store: Engine, settings: Settings, **roles: bool) -> Daemon:
    return Daemon(sessions(store), Parts(settings, rules=RULES), engine=store, **roles)


def count(store: Engine, table: type[Source] | type[Digest]) -> int:
    with sessions(store)() as session:
        return session.scalar(select(func.count()).select_from(table)) or 0


def test_a_job_that_raises_is_one_line_in_the_log_and_runs_again(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def failing() -> None:
        calls.append(1)
        raise OSError("the disk\nis full")

    with caplog.at_level(logging.ERROR):
        asyncio.run(guarded("watch", failing)())
        asyncio.run(guarded("watch", failing)())
    assert len(calls) == 2
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["watch failed: OSError: the disk is full; it runs again at its next tick"] * 2


def test_the_job_table_follows_the_roles_and_the_settings(store: Engine, tmp_path: Path) -> None:
    plain = settings_for(tmp_path)
    scheduler_only = daemon_of(store, plain, deliver_jobs=False)
    now = datetime(2026, 6, 14, 12, tzinfo=UTC)
    assert [j.id for j in scheduler_only.jobs(now)] == ["elect", "watch", "plan", "statistics", "retention", "zotero"]
    scheduler_only.leadership.release()
    worker = daemon_of(store, plain, plan_jobs=False)
    assert [j.id for j in worker.jobs(now)] == ["deliver", "channels"]
    assert worker.worker_lock is not None
    worker.worker_lock.release()
    everything = settings_for(
        tmp_path,
        llm={"base_url": "http://127.0.0.1:9/v1", "chat_model": "m"},
        inbox={"url": f"maildir://{tmp_path / 'inbox'}"},
    )
    both = daemon_of(store, everything)
    table = {j.id: j for j in both.jobs(now)}
    assert list(table) == [
        "elect",
        "watch",
        "plan",
        "statistics",
        "retention",
        "zotero",
        "llm",
        "inbox",
        "deliver",
        "channels",
    ]
    assert table["deliver"].first == now  # a worker sends what is due at once
    assert both.worker_lock is not None
    both.worker_lock.release()


def test_watching_reads_nothing_unless_this_process_leads(store: Engine, tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    copy_aged(sorted(SEEDS.glob("*.txt"))[0], dumps)
    daemon = daemon_of(store, settings_for(tmp_path, paths={"dump_dir": str(dumps)}), deliver_jobs=False)

    async def work() -> tuple[list[str], int, list[str]]:
        not_leading = await daemon.run_job("watch")
        stored = count(store, Source)
        assert daemon.leadership.try_acquire()
        leading = await daemon.run_job("watch")
        daemon.leadership.release()
        return not_leading, stored, leading

    not_leading, stored_before, leading = asyncio.run(work())
    assert (not_leading, stored_before) == (["watch"], 0)
    assert leading == ["watch", "plan"]  # new entries: the scheduler planned at once
    assert count(store, Source) == 1
    assert daemon.parts.metrics.last_success.labels("plan")._value.get() > 0


def test_a_watch_that_fails_is_logged_once_and_the_job_goes_on(
    store: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    copy_aged(sorted(SEEDS.glob("*.txt"))[0], dumps)
    daemon = daemon_of(store, settings_for(tmp_path, paths={"dump_dir": str(dumps)}), deliver_jobs=False)
    with store.begin() as connection:  # a restore that lost a table
        connection.execute(text("DROP TABLE sources"))

    async def work() -> list[str]:
        assert daemon.leadership.try_acquire()
        ran = await daemon.run_job("watch")
        daemon.leadership.release()
        return ran

    with caplog.at_level(logging.ERROR):
        assert asyncio.run(work()) == ["watch"]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("watch failed: OperationalError: ") and line.endswith("; the next scan tries again")
    assert "no such table: sources" in line


def test_planning_and_retention_skip_a_tick_while_a_pass_is_running(store: Engine, tmp_path: Path) -> None:
    daemon = daemon_of(store, settings_for(tmp_path), deliver_jobs=False)
    passes = daemon.parts.metrics.last_success.labels("plan")

    async def work() -> tuple[float, float]:
        assert daemon.leadership.try_acquire()
        async with daemon.planning.lock:  # a pass under way; a job that waited for it would never end
            await asyncio.wait_for(daemon.planning.plan(), 60)
            await asyncio.wait_for(daemon.upkeep.remove_expired(), 60)
            skipped = passes._value.get()
        await daemon.planning.plan()
        daemon.leadership.release()
        return skipped, passes._value.get()

    skipped, after = asyncio.run(work())
    assert skipped == 0 and after > 0


def test_a_stopping_process_starts_no_job(store: Engine, tmp_path: Path) -> None:
    daemon = daemon_of(store, settings_for(tmp_path), deliver_jobs=False)

    async def work() -> None:
        assert daemon.leadership.try_acquire()
        daemon.stop.set()
        assert await daemon.watching.watch() == NOTHING
        assert await daemon.planning.plan() == NOTHING
        await daemon.inbox.read()
        await daemon.delivering.deliver()
        daemon.leadership.release()

    asyncio.run(work())
    assert daemon.parts.metrics.last_success.labels("plan")._value.get() == 0
    assert daemon.delivering.running is None


def test_one_delivery_at_a_time_and_the_sends_in_flight_finish(store: Engine, tmp_path: Path) -> None:
    handler = SinkHandler()
    handler.faults = lambda recipient, attempt: Fault("data", stall=0.3)  # a slow relay, then 250
    factory: sessionmaker[Session] = sessions(store)
    queue_digests(factory, 3)
    with Sink(handler) as sink:
        daemon = daemon_of(store, settings_for(tmp_path, smtp_port=sink.port), plan_jobs=False)

        async def work() -> bool:
            await daemon.delivering.deliver()
            first = daemon.delivering.running
            await daemon.delivering.deliver()  # the tick after: the first is still sending
            same = daemon.delivering.running is first
            await daemon.delivering.finish()
            return same

        assert asyncio.run(work()) is True
        assert daemon.worker_lock is not None
        daemon.worker_lock.release()
    with factory() as session:
        states = session.scalars(select(Digest.state)).all()
    assert sorted(states) == [DigestState.SENT] * 3
    assert len(sink.received) == 3


def test_no_job_calls_another_and_the_scheduler_does_no_jobs_work() -> None:
    """A job is made of the process's shared parts alone (it holds no other job, so it
    cannot call one: it asks for what follows with ``Then``); the scheduler's module
    reads and writes no store and runs no service of a stage."""
    import ast

    from tests.conftest import ROOT

    jobs = ast.parse((ROOT / "bot" / "run" / "jobs.py").read_text())
    units = {node.name for node in jobs.body if isinstance(node, ast.ClassDef)}
    for node in jobs.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    taken = {ast.unparse(arg.annotation) for arg in item.args.args[1:] if arg.annotation}
                    assert not taken & units, (node.name, taken)
    scheduler = ast.parse((ROOT / "bot" / "run" / "scheduler.py").read_text())
    imported = {
        node.module for node in ast.walk(scheduler) if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    stages = ("bot.store", "bot.ingest", "bot.plan.planner", "bot.llm", "bot.returns", "bot.subscribers")
    assert not [module for module in imported if module.startswith(stages)], imported


def test_an_empty_day_left_open_is_said_once_not_every_minute(
    store: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 76, item 7: "planned 0 digests (1 with nothing new, 0 not due yet)" at INFO
    every minute while an empty day stayed open."""
    from bot.plan.report import PlanReport

    daemon = daemon_of(store, settings_for(tmp_path), deliver_jobs=False)
    try:
        with caplog.at_level(logging.INFO, logger="bot.run.scheduler"):
            for empty in (1, 1, 1, 2, 2):
                daemon.planning._planned(PlanReport(empty=empty))
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert said == ["planned 0 digests (1 with nothing new, 0 not due yet)",
                        "planned 0 digests (2 with nothing new, 0 not due yet)"]  # fmt: skip
    finally:
        daemon.leadership.release()
        if daemon.worker_lock is not None:
            daemon.worker_lock.release()
