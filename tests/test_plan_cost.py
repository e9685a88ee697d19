"""A guard that cannot be noisy: the work SQLite does to plan and deliver a day does not
grow with the history.

Work is counted in SQLite's virtual-machine instructions (its progress handler), which
are the same on every run and every machine for the same store and queries, not in
seconds.  Two stores hold the same subscribers and the same day's entries; one has a
week of history behind it, planned and delivered by the real planner and worker.  A
planner that looked for revised entries from every digest ever sent, not from its
window's, would run more instructions with each day of history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_bytes
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.engine import make_engine, refresh_statistics, sessions, upgrade
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Sink, SinkHandler
from tests.conftest import ROOT
from tests.helpers import dump_text, filter_expressions

RULES = load_rules(ROOT / "config" / "tags.toml")
TODAY = datetime(2026, 6, 20, 12, tzinfo=UTC)
SUBSCRIBERS = 60
ENTRIES = 25  # fewer than a digest holds: no reader has a backlog, whose window is bounded otherwise
STEP = 100  # instructions between two calls of the progress handler


@contextmanager
def counted(engine: Engine) -> Iterator[list[int]]:
    """The SQLite instructions run on *engine*'s connections meanwhile (in units of STEP)."""
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0  # go on

    def on_checkout(dbapi_conn: Any, *_: Any) -> None:
        dbapi_conn.set_progress_handler(tick, STEP)

    def on_checkin(dbapi_conn: Any, *_: Any) -> None:
        dbapi_conn.set_progress_handler(None, STEP)

    event.listen(engine, "checkout", on_checkout)
    event.listen(engine, "checkin", on_checkin)
    try:
        yield count
    finally:
        event.remove(engine, "checkout", on_checkout)
        event.remove(engine, "checkin", on_checkin)


def _store(folder: Path, days: int, sink: Sink) -> tuple[Engine, Settings]:
    """Subscribers with today's entries, and *days* earlier days planned and delivered."""
    engine = make_engine(f"sqlite:///{folder / f'history-{days}.sqlite3'}")
    upgrade(engine)
    factory = sessions(engine)
    settings = Settings.model_validate(
        {
            "paths": {"var_dir": str(folder / f"var-{days}"), "templates_dir": str(ROOT / "templates")},
            "smtp": {"port": sink.port},
            "sender": {"from_address": "digest@bot.example"},
        }
    )
    people = [
        clean_fields(f"reader{n}@example.org", filter=text, send_hour=8)
        for n, text in enumerate(filter_expressions(SUBSCRIBERS))
    ]
    save(factory, settings, people, TODAY - timedelta(days=days + 1))
    for back in range(days, 0, -1):
        day = TODAY - timedelta(days=back)
        dump = dump_text(ENTRIES, seed=back, start=back * 10_000)
        ingest_bytes(factory, dump.encode(), name=f"day-{back}", now=day - timedelta(hours=5), rules=RULES)
        plan(factory, settings, RULES, now=day)
        asyncio.run(deliver_now(factory, Parts(settings), clock=lambda day=day: day))
    today = dump_text(ENTRIES, seed=0, start=0)
    ingest_bytes(factory, today.encode(), name="today", now=TODAY - timedelta(hours=5), rules=RULES)
    return engine, settings


@pytest.mark.slow
def test_planning_and_delivering_a_day_costs_the_same_whatever_the_history(tmp_path: Path) -> None:
    with Sink(SinkHandler()) as sink:
        work: dict[int, tuple[int, int]] = {}
        for days in (0, 7):
            engine, settings = _store(tmp_path, days, sink)
            refresh_statistics(engine)
            factory = sessions(engine)
            with counted(engine) as planning:
                report = plan(factory, settings, RULES, now=TODAY)
            with counted(engine) as delivering:
                delivered = asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: TODAY))
            assert report.planned and delivered.sent == len(report.planned)
            work[days] = (planning[0], delivering[0])
            engine.dispose()
    (plan_none, deliver_none), (plan_week, deliver_week) = work[0], work[7]
    print(
        f"\nSQLite instructions x{STEP}: planning {plan_none} -> {plan_week}, delivery {deliver_none} -> {deliver_week}"
    )
    assert plan_week <= 1.3 * plan_none, f"planning: {plan_none} without history, {plan_week} with a week of it"
    assert deliver_week <= 1.3 * deliver_none, f"delivery: {deliver_none} without history, {deliver_week} with it"
