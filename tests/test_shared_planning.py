"""A planning pass shared by processes on PostgreSQL (``bot.plan.shared``,
``bot.store.planning_slices``).

How a pass is cut and claimed: slices of the active subscribers in id order, one
holder each, given back when the holder's connection dies (as it does when its process
is killed), a pass too old to say who is due planned no further.  Then three planners
sharing a fortnight of passes against one planner on a store fed the same days: the
same digests, items and watermarks.  tests/test_scale.py runs the processes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.select import SelectionCache
from bot.config import Settings
from bot.ingest.storing import ingest_bytes
from bot.plan import plan
from bot.plan.shared import FRESH_FOR, plan_shared
from bot.store.derived_tables import PlanningSlice
from bot.store.engine import make_engine, sessions, transaction, upgrade
from bot.store.planning_slices import finish_slice, open_slices, take_slice
from bot.store.schema import SubscriberRow
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from tests.conftest import PG_SKIP, PG_URL
from tests.helpers import dump_text, postgres_schema, settings_for
from tests.test_standing import FILTERS, RULES, START, _planned, _sqlite_store

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


@pytest.fixture
def pg() -> Iterator[Engine]:
    with postgres_schema(PG_URL) as url:
        engine = make_engine(url)
        upgrade(engine)
        yield engine
        engine.dispose()


def _settings(tmp_path: Path) -> Settings:
    return settings_for(tmp_path, digest={"max_entries": 4, "max_age_days": 8})


def _readers(factory: sessionmaker[Session], cfg: Settings, count: int) -> None:
    readers = [clean_fields(f"r{n}@example.org", filter=FILTERS[n % len(FILTERS)]) for n in range(count)]
    save(factory, cfg, readers, START - timedelta(days=1))


def _slices(factory: sessionmaker[Session]) -> list[tuple[int, int, bool]]:
    with factory() as session:
        rows = session.execute(
            select(PlanningSlice.first_id, PlanningSlice.last_id, PlanningSlice.done_at).order_by(PlanningSlice.id)
        )
        return [(first, last, done is not None) for first, last, done in rows]


def test_a_pass_cuts_the_active_subscribers_in_id_order_and_waits_until_they_are_planned(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    cfg = _settings(tmp_path)
    _readers(factory, cfg, 11)
    with factory() as session:
        ids = list(session.scalars(select(SubscriberRow.id).order_by(SubscriberRow.id)))
    with transaction(factory) as session:
        session.execute(update(SubscriberRow).where(SubscriberRow.id == ids[4]).values(status="paused"))
    active = [i for i in ids if i != ids[4]]
    with transaction(factory) as session:
        assert open_slices(session, NOW, 4, fresh_after=NOW - FRESH_FOR)
    assert _slices(factory) == [
        (active[0], active[3], False),
        (active[4], active[7], False),
        (active[8], active[9], False),
    ]
    with transaction(factory) as session:  # a pass still being planned: no second one
        assert not open_slices(session, NOW + timedelta(minutes=1), 4, fresh_after=NOW - FRESH_FOR)
    with factory.kw["bind"].connect() as claims:
        while (taken := take_slice(claims, fresh_after=NOW - FRESH_FOR)) is not None:
            assert taken.pass_at == NOW
            finish_slice(claims, taken, now=NOW, by="test")
    later = NOW + timedelta(minutes=1)
    with transaction(factory) as session:  # all planned: the next pass, and the last one's rows are gone
        assert open_slices(session, later, 100, fresh_after=later - FRESH_FOR)
    assert _slices(factory) == [(active[0], active[-1], False)]


def test_a_pass_begun_too_long_ago_is_planned_no_further(factory: sessionmaker[Session], tmp_path: Path) -> None:
    _readers(factory, _settings(tmp_path), 3)
    with transaction(factory) as session:
        assert open_slices(session, NOW, 2, fresh_after=NOW - FRESH_FOR)
    later = NOW + FRESH_FOR + timedelta(minutes=1)
    with factory.kw["bind"].connect() as claims:
        assert take_slice(claims, fresh_after=later - FRESH_FOR) is None
    with transaction(factory) as session:
        assert open_slices(session, later, 2, fresh_after=later - FRESH_FOR)
    assert [done for *_, done in _slices(factory)] == [False, False]
    with factory.kw["bind"].connect() as claims:
        taken = take_slice(claims, fresh_after=later - FRESH_FOR)
        assert taken is not None and taken.pass_at == later


@PG_SKIP
def test_a_slice_has_one_holder_and_goes_back_when_its_holder_dies(pg: Engine, tmp_path: Path) -> None:
    """Three connections as three processes: each takes a slice of its own; when the
    server ends the first one's session (its process was killed), its slice, not done,
    goes to the next that asks, and a slice done is never taken again."""
    factory = sessions(pg)
    _readers(factory, _settings(tmp_path), 9)
    with transaction(factory) as session:
        assert open_slices(session, NOW, 3, fresh_after=NOW - FRESH_FOR)
    fresh = NOW - FRESH_FOR
    first, second, third = pg.connect(), pg.connect(), pg.connect()
    try:
        a, b, c = (take_slice(connection, fresh_after=fresh) for connection in (first, second, third))
        assert a is not None and b is not None and c is not None
        assert len({a.slice_id, b.slice_id, c.slice_id}) == 3
        finish_slice(second, b, now=NOW, by="second")
        assert take_slice(second, fresh_after=fresh) is None  # a and c are held, b is done
        killed = first.execute(text("SELECT pg_backend_pid()")).scalar()
        with pg.connect() as admin:
            assert admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": killed}).scalar()
            alive = text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid")
            deadline = time.monotonic() + 10  # the server ends the session a moment after it is asked
            while admin.execute(alive, {"pid": killed}).scalar() and time.monotonic() < deadline:
                admin.rollback()  # the server's activity view is read once a transaction
                time.sleep(0.05)
        again = take_slice(second, fresh_after=fresh)
        assert again is not None and again.slice_id == a.slice_id
    finally:
        for connection in (first, second, third):
            try:
                connection.close()
            except Exception:  # noqa: BLE001, S110 - the terminated one cannot be closed cleanly
                pass


@PG_SKIP
def test_three_planners_sharing_passes_plan_what_one_planner_plans(pg: Engine, tmp_path: Path) -> None:
    """A fortnight of days, each planned by three planners sharing slices of seven
    readers (each keeping its own verdicts from day to day, as a process does) on
    PostgreSQL, and by one planner on a SQLite store fed the same days: after every
    day both hold the same digests, items and watermarks, and more than one planner
    planned."""
    shared = sessions(pg)
    reference = sessions(_sqlite_store(tmp_path / "reference.sqlite3"))
    cfg = _settings(tmp_path)
    for store in (shared, reference):
        _readers(store, cfg, 40)
    caches = [SelectionCache() for _ in range(3)]
    planners: set[str] = set()
    now = START
    for day in range(14):
        dump = dump_text(25, seed=day, start=day * 100).encode()
        for store in (shared, reference):
            ingest_bytes(store, dump, name=f"day-{day}", now=now - timedelta(hours=1), rules=RULES)
        with transaction(shared) as session:
            assert open_slices(session, now, 7, fresh_after=now - FRESH_FOR)
        failures: list[BaseException] = []

        def planner(
            name: str, cache: SelectionCache, at: datetime = now, failures: list[BaseException] = failures
        ) -> None:
            try:
                plan_shared(shared, cfg, RULES, now=at, by=name, opens=False, cache=cache)
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                failures.append(exc)

        threads = [threading.Thread(target=planner, args=(f"p{n}", caches[n])) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not failures, failures
        with shared() as session:
            planners |= set(session.scalars(select(PlanningSlice.done_by).where(PlanningSlice.done_by.is_not(None))))
        plan(reference, cfg, RULES, now=now)
        assert _planned(shared, now) == _planned(reference, now), f"day {day}"
        assert all(done for *_, done in _slices(shared))
        now += timedelta(days=1)
    assert len(planners) >= 2, planners


@PG_SKIP
def test_a_planner_told_to_stop_leaves_the_slices_it_has_not_begun(pg: Engine, tmp_path: Path) -> None:
    """SIGTERM sets the daemon's stop: its planner finishes the slice it holds and
    takes no other, so the rest go to the processes that keep running."""
    factory = sessions(pg)
    cfg = _settings(tmp_path)
    _readers(factory, cfg, 9)
    with transaction(factory) as session:
        assert open_slices(session, START, 3, fresh_after=START - FRESH_FOR)
    asked: list[int] = []

    def stop_after_one() -> bool:
        asked.append(1)
        return len(asked) > 1

    report = plan_shared(factory, cfg, RULES, now=START, by="stopping", opens=False, stop=stop_after_one)
    assert report.not_due + report.empty + len(report.planned) == 3
    assert [done for *_, done in _slices(factory)] == [True, False, False]
    rest = plan_shared(factory, cfg, RULES, now=START, by="staying", opens=False)
    assert rest.not_due + rest.empty + len(rest.planned) == 6
    assert all(done for *_, done in _slices(factory))
