"""Plan stage: a planning pass shared by every process on a PostgreSQL store.

The scheduler's leader opens a pass: the active subscribers cut into slices of
``PLAN_BATCH`` by id (``bot.store.planning_slices``).  The leader and every other
scheduler and worker on the store then plan slices until none is left: a slice is locked
in the store while it is planned and marked done after, and goes back to the others when
its process dies (the lock goes with its connection), so a pass scales with the
processes that share it.  A slice is planned as of its pass's time, whoever plans it;
what one reader is given is decided as ``bot.plan.planner.plan`` decides it.  SQLite
keeps one planner.  Never renders or sends.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.select import SelectionCache
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.domain import SubscriberStatus
from bot.plan.batch_choice import PlanningPass
from bot.plan.planner import PLAN_BATCH, close_pass, open_pass, plan_subscribers
from bot.plan.report import PlanReport
from bot.store.engine import transaction
from bot.store.planning_slices import finish_slice, open_slices, take_slice
from bot.store.subscribers import subscribers_after
from bot.taste.training import refresh_models
from bot.unsubscribes import journal_of

# A pass begun longer ago than this is planned no further: its time is too old to say
# who is due, and the leader's next pass plans what it left.
FRESH_FOR = timedelta(minutes=10)


def shares_planning(factory: sessionmaker[Session]) -> bool:
    """Whether processes share planning passes on this store (PostgreSQL) or one plans (SQLite)."""
    return bool(factory.kw["bind"].dialect.name == "postgresql")


def plan_shared(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    *,
    now: datetime,
    by: str,
    opens: bool,
    cache: SelectionCache | None = None,
    slice_size: int = PLAN_BATCH,
    stop: Callable[[], bool] = lambda: False,
) -> PlanReport:
    """Plan the slices of the passes under way that no other process holds, until none
    is left; what this process planned.  With *opens* (the scheduler's leader): first
    train the models that learned something, apply the unsubscribe journal, and open a
    pass as of *now* unless one begun within ``FRESH_FOR`` is still being planned.
    *by*: this process's name, kept with each slice it planned; *cache*: the filters'
    verdicts this process kept from its earlier passes; *slice_size*: subscribers a
    slice; *stop*: asked before each slice (a process told to stop leaves the rest to
    the others)."""
    journal = journal_of(factory)
    fresh_after = now - FRESH_FOR
    if opens:
        refresh_models(factory, now, rules=rules)  # a reader's models learn their new papers before their digest
        journal.try_apply_pending(factory)
        with transaction(factory) as session:
            open_slices(session, now, slice_size, fresh_after=fresh_after)
    report = PlanReport()
    passes: dict[datetime, PlanningPass] = {}
    leaving: set[int] = set()
    cache = SelectionCache() if cache is None else cache
    with factory.kw["bind"].connect() as claims:
        while not stop() and (taken := take_slice(claims, fresh_after=fresh_after)) is not None:
            run = passes.get(taken.pass_at)
            if run is None:
                run = passes[taken.pass_at] = open_pass(factory, settings, rules, now=taken.pass_at, cache=cache)
                run.report = report
                leaving = journal.pending_subscribers()  # acknowledged but not applied: as good as gone
            with factory() as session:
                most = taken.last_id - taken.first_id + 1
                batch = subscribers_after(
                    session, taken.first_id - 1, most, status=SubscriberStatus.ACTIVE, through_id=taken.last_id
                )
            plan_subscribers(run, batch, leaving)
            finish_slice(claims, taken, now=now, by=by)
    for run in passes.values():
        close_pass(run)
    return report
