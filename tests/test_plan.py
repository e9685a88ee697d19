"""The set-based planner against the definition of what a subscriber gets.

Definition (``select_for`` with the whole subscription window and the whole
ledger as the exclusion): the best ``max_entries`` of the entries first seen
in the window, matching the filter, never claimed for them.  The planner
instead reads from each subscriber's watermark (less a margin) and only the
recent part of the ledger; over days of ingest with entries carried over
(``max_entries`` small), filters changed, digests cancelled (entries given
back) and subscribers joining late, both must choose the same entries in the
same order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.select import select_for
from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import SubscriberStatus
from bot.ingest.service import ingest_bytes
from bot.plan import IdRuns, plan
from bot.store.engine import make_engine, sessions, transaction, upgrade
from bot.store.ledger import claimed_entry_ids, claimed_from, release_entries
from bot.store.schema import Digest, LedgerEntry
from bot.store.schema import Subscriber as SubscriberRow
from bot.store.subscribers import list_subscribers
from bot.subscriptions import clean_fields, save, set_filter
from tests.conftest import ROOT
from tests.helpers import dump_text, filter_expressions

RULES = load_rules(ROOT / "config" / "tags.toml")
START = datetime(2026, 6, 1, 12, tzinfo=UTC)
FILTERS = filter_expressions(40)
_runs = itertools.count()


def _expected(factory: sessionmaker[Session], cfg: Settings, now: datetime) -> dict[int, list[int]]:
    """Per active subscriber, the entry ids the definition gives at *now*."""
    with factory() as session:
        out = {}
        for subscriber in list_subscribers(session, status=SubscriberStatus.ACTIVE):
            found = select_for(session, subscriber, RULES, as_of=now, exclude=claimed_entry_ids(session, subscriber.id))
            out[subscriber.id] = [c.entry.id for c in found[: cfg.digest.max_entries]]
        return out


@given(st.lists(st.integers(-(2**62), 2**62) | st.integers(0, 20), max_size=60))
def test_id_runs_keep_every_id_in_order(ids: list[int]) -> None:
    runs = IdRuns()
    for value in ids:
        runs.append(value)
    assert list(runs) == ids and len(runs) == len(ids) and bool(runs) is bool(ids)
    assert IdRuns(ids) == runs


def _planned(factory: sessionmaker[Session], digest_ids: Iterable[int]) -> dict[int, list[int]]:
    with factory() as session:
        rows = session.execute(
            select(Digest.subscriber_id, LedgerEntry.entry_id)
            .join(LedgerEntry, LedgerEntry.digest_id == Digest.id)
            .where(Digest.id.in_(list(digest_ids)))
            .order_by(Digest.subscriber_id, LedgerEntry.position)
        )
        out: dict[int, list[int]] = {}
        for subscriber_id, entry_id in rows:
            out.setdefault(subscriber_id, []).append(entry_id)
        return out


day_events = st.fixed_dictionaries(
    {
        "entries": st.integers(0, 12),
        "join": st.lists(st.tuples(st.sampled_from(FILTERS), st.sampled_from(["0d", "3d", "all"])), max_size=3),
        "refilter": st.lists(st.tuples(st.integers(0, 20), st.sampled_from(FILTERS)), max_size=2),
        "cancel": st.lists(st.integers(0, 50), max_size=2),
        "late_ingest": st.booleans(),  # an ingest that began before the last pass and committed after it
        "gap_days": st.integers(1, 3),
    }
)


@settings(max_examples=25, deadline=None)
@given(days=st.lists(day_events, min_size=2, max_size=6), max_entries=st.integers(1, 4))
@pytest.mark.slow
def test_planner_chooses_what_the_whole_window_would(tmp_path_factory, days, max_entries: int) -> None:
    folder: Path = tmp_path_factory.mktemp(f"plan{next(_runs)}")
    engine = make_engine(f"sqlite:///{folder / 'store.sqlite3'}")
    upgrade(engine)
    factory = sessions(engine)
    cfg = Settings.model_validate({"paths": {"var_dir": str(folder / "var")}, "digest": {"max_entries": max_entries}})
    now = START
    number = 0
    last_pass = None
    for n, event in enumerate(days):
        if event["late_ingest"] and last_pass is not None:
            # first_seen before the last pass, though the pass could not see it then.
            ingest_bytes(
                factory,
                dump_text(3, seed=900 + n, start=100_000 + number).encode(),
                name=f"late-{n}",
                now=last_pass - timedelta(minutes=30),
                rules=RULES,
            )
            number += 3
        ingest_bytes(
            factory,
            dump_text(event["entries"], seed=n, start=number).encode(),
            name=f"day-{n}",
            now=now - timedelta(hours=1),
            rules=RULES,
        )
        number += event["entries"]
        people = [
            clean_fields(f"reader{n}x{i}@example.org", filter=text, backfill=backfill)
            for i, (text, backfill) in enumerate(event["join"])
        ]
        if n == 0:
            people += [clean_fields(f"first{i}@example.org", filter=text) for i, text in enumerate(FILTERS[:6])]
        if people:
            save(factory, cfg, people, now - timedelta(hours=2))
        with factory() as session:
            everyone = list_subscribers(session)
            digests = list(session.scalars(select(Digest.id).order_by(Digest.id)))
        for index, text in event["refilter"]:
            set_filter(factory, cfg, everyone[index % len(everyone)], text, now - timedelta(hours=1))
        for index in event["cancel"]:
            if digests:
                with transaction(factory) as session:  # what delivery does when the subscriber left
                    release_entries(session, digests[index % len(digests)])
        expected = _expected(factory, cfg, now)
        report = plan(factory, cfg, RULES, now=now, all_due=True)
        got = _planned(factory, report.planned)
        assert got == {k: v for k, v in expected.items() if v}, f"day {n}"
        with factory() as session:  # this pass set the watermark of exactly those left with nothing pending
            this_pass = select(Digest.subscriber_id, Digest.pending_count).where(Digest.planned_at == now)
            pending = dict(session.execute(this_pass).all())
            marked = set(session.scalars(select(SubscriberRow.id).where(SubscriberRow.planned_through == now)))
        assert marked == {sid for sid, count in pending.items() if count == 0}, f"day {n}"
        last_pass = now
        now += timedelta(days=event["gap_days"])
    engine.dispose()


def test_a_day_another_planner_took_meanwhile_is_left_to_it(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """Between this planner's reads and its batch insert another one plans a
    subscriber's day: the batch insert fails on the unique index, the others
    are written one by one, that subscriber is left alone, and no watermark is
    set for them."""
    from sqlalchemy import event, insert

    cfg = Settings.model_validate({"paths": {"var_dir": str(tmp_path / "var")}})
    save(factory, cfg, [clean_fields(f"r{i}@example.org") for i in range(5)], START - timedelta(days=1))
    ingest_bytes(factory, dump_text(5, seed=1).encode(), name="d", now=START - timedelta(hours=1), rules=RULES)
    with factory() as session:
        taken = session.scalar(select(SubscriberRow.id).where(SubscriberRow.email == "r2@example.org"))
    ended = []

    def other_planner(session: Session, transaction) -> None:
        ended.append(transaction)
        if len(ended) == 2:  # the subscriber batch was read, then this planner's selection
            with factory.kw["bind"].begin() as connection:
                connection.execute(
                    insert(Digest.__table__).values(
                        subscriber_id=taken,
                        local_date=START.date(),
                        kind="scheduled",
                        state="queued",
                        attempts=0,
                        next_attempt_at=START,
                        message_id="<other@planner>",
                        entry_count=0,
                        pending_count=0,
                        planned_at=START,
                    )
                )

    event.listen(factory, "after_transaction_end", other_planner)
    try:
        report = plan(factory, cfg, RULES, now=START, all_due=True)
    finally:
        event.remove(factory, "after_transaction_end", other_planner)
    assert len(report.planned) == 4
    with factory() as session:
        owners = {d.subscriber_id: d.message_id for d in session.scalars(select(Digest))}
        marked = set(session.scalars(select(SubscriberRow.id).where(SubscriberRow.planned_through.is_not(None))))
    assert owners[taken] == "<other@planner>" and len(owners) == 5
    assert taken not in marked and len(marked) == 4


def test_purging_a_subscriber_removes_their_ledger_rows_and_no_one_elses(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """The ledger's subscriber_id has no foreign key of its own (its key is entry
    first): the rows go with the digests that carried them."""
    from bot.subscriptions import remove

    cfg = Settings.model_validate({"paths": {"var_dir": str(tmp_path / "var")}})
    save(factory, cfg, [clean_fields(f"r{i}@example.org") for i in range(3)], START - timedelta(days=1))
    ingest_bytes(factory, dump_text(5, seed=1).encode(), name="d", now=START - timedelta(hours=1), rules=RULES)
    assert len(plan(factory, cfg, RULES, now=START, all_due=True).planned) == 3
    with factory() as session:
        ids = {s.email: s.id for s in list_subscribers(session)}
        before = {sid: claimed_entry_ids(session, sid) for sid in ids.values()}
    assert all(len(entries) == 5 for entries in before.values())
    remove(factory, "r1@example.org", purge=True, now=START)
    with factory() as session:
        rows = session.execute(select(LedgerEntry.subscriber_id, LedgerEntry.entry_id)).all()
    assert {sid for sid, _ in rows} == {ids["r0@example.org"], ids["r2@example.org"]}
    assert len(rows) == 10


def test_claimed_rows_read_per_entry_or_through_digests_agree(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """``claimed_from`` reads a short window per entry and a long one through the
    subscribers' digests; both must find what the ledger holds for the window."""
    cfg = Settings.model_validate({"paths": {"var_dir": str(tmp_path / "var")}, "digest": {"max_entries": 3}})
    save(
        factory,
        cfg,
        [clean_fields(f"r{i}@example.org", filter=f) for i, f in enumerate(["*", "gpu", "llm or snn", "*"])],
        START - timedelta(days=1),
    )
    for day in range(3):
        now = START + timedelta(days=day)
        ingest_bytes(
            factory,
            dump_text(6, seed=day, start=day * 100).encode(),
            name=f"d{day}",
            now=now - timedelta(hours=1),
            rules=RULES,
        )
        plan(factory, cfg, RULES, now=now, all_due=True)
    with factory() as session:
        subscribers = [s.id for s in list_subscribers(session)]
        entry_ids = sorted(session.scalars(select(LedgerEntry.entry_id).distinct()))
        expected = {sid: claimed_entry_ids(session, sid) for sid in subscribers}
        for window in (entry_ids, entry_ids[len(entry_ids) // 2 :]):
            want = {sid: got & set(window) for sid, got in expected.items() if got & set(window)}
            padding = list(range(10**6, 10**6 + 1000))  # ids no entry has: a long window
            assert claimed_from(session, subscribers, window) == want
            assert claimed_from(session, subscribers, window + padding) == want
            assert claimed_from(session, subscribers[1:3], window + padding) == {
                sid: e for sid, e in want.items() if sid in subscribers[1:3]
            }
    assert sum(len(e) for e in expected.values()) > 10
