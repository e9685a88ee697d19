"""Plan stage: who is due and what each gets.

Planning decides from the database alone: a subscriber is due once their local send
time has passed today and they have no scheduled digest for that local day (a partial
unique index makes a second one impossible), or their day was found empty and is still
open (``bot.plan.days``): then the digest planned fills that empty day's row.  A digest
claims its entries by its body when planned (``bot.store.ledger``), in sections for a
filter of several interests (``bot.plan.sections``).  This module runs a pass batch by
batch; what each due reader of a batch gets is ``bot.plan.batch_choice``'s.  Never
renders, never sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date, datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.candidates import local_send_time
from bot.choose.filters import filter_fault
from bot.choose.select import SelectionCache
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.domain import DigestKind, DigestState, Subscriber, SubscriberStatus
from bot.plan.batch_choice import PlanningPass, choose_batch
from bot.plan.cadence import sends_on
from bot.plan.days import local_today
from bot.plan.report import PlanReport
from bot.plan.writes import message_ids, write_batch, write_held
from bot.store.entry_reads import latest_entry_at
from bot.store.ledger import lock_subscribers
from bot.store.sources import latest_dump_at
from bot.store.subscribers import subscribers_after
from bot.taste.explain import models_usable
from bot.taste.training import refresh_models
from bot.unsubscribes import journal_of

Clock = Callable[[], datetime]


PLAN_BATCH = 1000  # subscribers read, selected for and written per transaction


def plan(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    *,
    now: datetime,
    all_due: bool = False,
    subscribers: Iterable[Subscriber] | None = None,
    kind: DigestKind = DigestKind.SCHEDULED,
    cache: SelectionCache | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> PlanReport:
    """Queue a digest for every active subscriber whose cadence sends today and whose send
    time has passed (or every one, with *all_due*) and who has none for today, or whose
    day was empty and is still open (``bot.plan.days``) and new entries have arrived.

    Set-based: subscribers are read in batches of ``PLAN_BATCH`` by id; each (filter,
    window) is ranked once per pass (``SelectionCache``); a batch's digests and their
    bodies are written in one transaction.  A subscriber's window starts at their
    watermark (less a margin) when they have a valid one, so planning reads about a day
    of entries and what was sent of them per subscriber however long the history; the
    result is what the whole window would give, because every entry behind the watermark
    was claimed or did not match."""
    refresh_models(factory, now, rules=rules)  # a reader's models learn their new papers before their digest
    journal = journal_of(factory)
    journal.try_apply_pending(factory)
    leaving = journal.pending_subscribers()  # acknowledged but not applied: as good as gone
    return plan_without_journal(
        factory,
        settings,
        rules,
        now=now,
        all_due=all_due,
        subscribers=subscribers,
        kind=kind,
        leaving=leaving,
        cache=cache,
        stop=stop,
    )


def plan_without_journal(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    *,
    now: datetime,
    all_due: bool,
    subscribers: Iterable[Subscriber] | None,
    kind: DigestKind,
    leaving: set[int] | frozenset[int],
    cache: SelectionCache | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> PlanReport:
    """``plan`` with the unsubscribe journal read (*leaving*: who asked to leave); writes
    only through *factory* (a preview rolls it back); *cache*: earlier passes' verdicts;
    *stop*: asked before each batch (a daemon told to stop leaves the rest to its next pass)."""
    run = open_pass(factory, settings, rules, now=now, kind=kind, all_due=all_due, cache=cache)
    if subscribers is not None:
        # Each reader once, however often they were named (``send-now a@x A@X``).
        chosen = list(
            {s.id: s for s in subscribers if s.status is SubscriberStatus.ACTIVE and s.id not in leaving}.values()
        )
        batches: Iterable[list[Subscriber]] = (chosen[i : i + PLAN_BATCH] for i in range(0, len(chosen), PLAN_BATCH))
    else:
        batches = _active_batches(factory)
    for batch in batches:
        if stop():
            break
        plan_subscribers(run, batch, leaving)
    close_pass(run)
    return run.report


def open_pass(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    *,
    now: datetime,
    kind: DigestKind = DigestKind.SCHEDULED,
    all_due: bool = False,
    cache: SelectionCache | None = None,
) -> PlanningPass:
    """A planning pass as of *now*, ready to plan batches of subscribers (``plan_subscribers``)."""
    with factory() as session:
        latest_entry, latest_dump = latest_entry_at(session), latest_dump_at(session)
    run = PlanningPass(factory, settings, rules, now, kind, all_due, latest_entry, latest_dump, _cache_or_new(cache))
    with factory() as session:
        if models_usable(session):  # only then are numpy and scipy loaded
            from bot.taste.ranking import TastePass

            run.taste = TastePass.open(session)
    if settings.ranker.url or settings.llm.embedding_model:  # only then are httpx and pydantic loaded
        from bot.plan.challenger import Challenger
        from bot.tokens import signing_key

        run.challenger = Challenger.open(settings, signing_key(settings))
    return run


def close_pass(run: PlanningPass) -> None:
    """The end of a pass: the outside ranker's last answer awaited and applied."""
    if run.challenger is not None:
        run.challenger.close(run.factory, run.now, run.report)


def plan_subscribers(run: PlanningPass, batch: list[Subscriber], leaving: set[int] | frozenset[int]) -> None:
    """Plan the due subscribers of *batch* (at most ``PLAN_BATCH``, by id) but those *leaving*."""
    due: list[tuple[Subscriber, date]] = []
    for subscriber in batch:
        if subscriber.id in leaving:
            continue
        fault = subscriber.fault or filter_fault(subscriber.filter)
        if fault is not None:  # that reader only: never planned while it is there
            run.report.unreadable += 1
            run.report.unreadable_first = run.report.unreadable_first or f"{subscriber.email}: {fault}"
            continue
        day = local_today(subscriber.timezone, run.now)
        if (
            run.kind is DigestKind.SCHEDULED
            and not run.all_due
            and (run.now < local_send_time(subscriber, day) or not sends_on(subscriber.cadence, day))
        ):
            run.report.not_due += 1
            continue
        due.append((subscriber, day))
    if due:
        _plan_batch(run, due)


def _cache_or_new(cache: SelectionCache | None) -> SelectionCache:
    return SelectionCache() if cache is None else cache


def _active_batches(factory: sessionmaker[Session]) -> Iterable[list[Subscriber]]:
    after = 0
    while True:
        with factory() as session:
            batch = subscribers_after(session, after, PLAN_BATCH, status=SubscriberStatus.ACTIVE)
        if not batch:
            return
        yield batch
        after = batch[-1].id


def _plan_batch(run: PlanningPass, due: list[tuple[Subscriber, date]]) -> None:
    make_id = message_ids(run.settings.sender)
    with run.factory() as session:
        # What is read below stays true until this commits: on PostgreSQL a rival writer
        # for these readers waits for their rows; on SQLite for the store's write lock.
        lock_subscribers(session, [s.id for s, _ in due])
        batch = choose_batch(session, run, due)
        if run.challenger is not None:
            batch.choices = run.challenger.hold(session, batch.choices, run.now)
        written = write_held(session, batch, now=run.now, make_id=make_id, rankings=run.standings)
    if written is None:
        run.standings.save(run.factory)
        written = write_batch(run.factory, batch, now=run.now, make_id=make_id, bodies=run.standings.bodies)
    if run.challenger is not None:  # the last batch's answer came while this one was planned
        run.challenger.settle(run.factory, run.now, run.report)
        run.challenger.ask(run.factory, written)
    for digest_id, choice in written:
        if choice.state is DigestState.EMPTY:
            run.report.empty += 1
        else:
            run.report.planned.append(digest_id)
