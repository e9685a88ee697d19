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

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.select import SelectionCache
from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import DigestState
from bot.ingest.storing import ingest_bytes
from bot.plan import IdRuns, plan
from bot.plan.days import closes_at, local_time
from bot.store.claims import claimed_entry_ids, claimed_from
from bot.store.engine import make_engine, sessions, transaction, upgrade
from bot.store.ledger import release_entries
from bot.store.schema import Digest, Entry, SubscriberRow
from bot.store.subscribers import list_subscribers
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save, set_filter
from tests.conftest import ROOT
from tests.helpers import (
    claims,
    digest_entry_ids,
    dump_text,
    expected_digests,
    filter_expressions,
    render_dump,
    settings_for,
    sized,
)

RULES = load_rules(ROOT / "config" / "tags.toml")
START = datetime(2026, 6, 1, 12, tzinfo=UTC)
FILTERS = filter_expressions(40)


def _expected(factory: sessionmaker[Session], cfg: Settings, now: datetime) -> dict[int, list[int]]:
    """Per active subscriber, the entry ids the definition gives at *now*."""
    return expected_digests(factory, cfg, now, RULES)


@given(st.lists(st.integers(-(2**62), 2**62) | st.integers(0, 20), max_size=60))
def test_id_runs_keep_every_id_in_order(ids: list[int]) -> None:
    runs = IdRuns()
    for value in ids:
        runs.append(value)
    assert list(runs) == ids and len(runs) == len(ids) and bool(runs) is bool(ids)
    assert IdRuns(ids) == runs


def _planned(factory: sessionmaker[Session], digest_ids: Iterable[int]) -> dict[int, list[int]]:
    with factory() as session:
        out: dict[int, list[int]] = {}
        for subscriber_id, digest_id in session.execute(
            select(Digest.subscriber_id, Digest.id).where(Digest.id.in_(list(digest_ids))).order_by(Digest.id)
        ):
            out.setdefault(subscriber_id, []).extend(digest_entry_ids(session, digest_id))
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
    folder: Path = tmp_path_factory.mktemp("plan")
    engine = make_engine(f"sqlite:///{folder / 'store.sqlite3'}")
    upgrade(engine)
    factory = sessions(engine)
    cfg = settings_for(folder, digest={"max_entries": max_entries})
    now = START
    number = 0
    last_pass = None
    kept = SelectionCache()  # verdicts kept from pass to pass, as the daemon keeps them
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
        report = plan(factory, cfg, RULES, now=now, all_due=True, cache=kept)
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

    cfg = settings_for(tmp_path)
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


def _five_readers_and_a_dump(factory: sessionmaker[Session], tmp_path: Path) -> tuple[Settings, int, int]:
    """Five readers of everything and a dump of five entries; the settings, the third
    reader (the one a rival writes for) and the first entry (what the rival gives)."""
    from sqlalchemy import func

    cfg = settings_for(tmp_path)
    save(factory, cfg, [clean_fields(f"r{i}@example.org") for i in range(5)], START - timedelta(days=1))
    ingest_bytes(factory, dump_text(5, seed=1).encode(), name="d", now=START - timedelta(hours=1), rules=RULES)
    with factory() as session:
        taken = session.scalar(select(SubscriberRow.id).where(SubscriberRow.email == "r2@example.org"))
        entry = session.scalar(select(func.min(Entry.id)))
    assert taken is not None and entry is not None
    return cfg, taken, entry


def test_an_entry_another_planner_gave_a_reader_meanwhile_is_not_given_again(
    factory: sessionmaker[Session], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After this planner read what its readers had and before it writes, another one
    (a manual digest) gives a reader one of the day's entries: nothing in the schema refuses a
    second claim, so the write checks before it commits; that reader is left alone for
    this pass, the others are written, and no entry is claimed twice for anyone.  (A
    batch writes in the transaction that read, holding its readers, and no rival gets in
    between: ``test_a_rival_waits_for_the_batch_and_then_refuses``; this is the write
    that follows when that one is refused.)"""
    monkeypatch.setattr("bot.plan.planner.write_held", lambda *args, **kwargs: None)

    import bot.plan.planner as planner
    from bot.domain import DigestKind
    from bot.store.ledger import NewDigest, Planned, insert_digests

    cfg, taken, entry = _five_readers_and_a_dump(factory, tmp_path)
    write = planner.write_batch

    def another_planner_writes_first(*args: Any, **kwargs: Any) -> Any:
        other = NewDigest(
            taken, START.date(), DigestKind.MANUAL, DigestState.QUEUED, [Planned(entry, None, "", (), "u")], 0
        )
        with transaction(factory) as session:
            insert_digests(session, [other], now=START, message_id=lambda n, d: "<other@planner>")
        return write(*args, **kwargs)

    monkeypatch.setattr(planner, "write_batch", another_planner_writes_first)
    report = plan(factory, cfg, RULES, now=START, all_due=True)
    assert len(report.planned) == 4
    claimed = claims()
    with factory() as session:
        pairs = session.execute(select(claimed.c.subscriber_id, claimed.c.entry_id)).all()
        owners = [d.message_id for d in session.scalars(select(Digest).where(Digest.subscriber_id == taken))]
    assert len(pairs) == len(set(pairs)) == 4 * 5 + 1
    assert owners == ["<other@planner>"]


def test_a_rival_waits_for_the_batch_and_then_refuses(
    factory: sessionmaker[Session], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manual digest written while a batch is being planned waits for the batch's one
    transaction (it holds its readers, on PostgreSQL their rows and on SQLite the
    store's write lock, from before it read what they had until their digests are
    written), then finds the entry taken and refuses: no reader is given an entry twice."""
    import threading

    import bot.plan.batch_choice as batch_choice
    import bot.plan.planner as planner
    from bot.domain import DigestKind
    from bot.store.ledger import EntriesTaken, NewDigest, Planned, insert_digests, lock_subscribers
    from bot.store.sent import refuse_double_claims

    cfg, taken, entry = _five_readers_and_a_dump(factory, tmp_path)
    outcome: list[BaseException | None] = []

    def rival() -> None:
        other = NewDigest(
            taken, START.date(), DigestKind.MANUAL, DigestState.QUEUED, [Planned(entry, None, "", (), "u")], 0
        )
        try:
            with transaction(factory) as session:
                lock_subscribers(session, [taken])  # as every writer of digests with entries does
                ids = insert_digests(session, [other], now=START, message_id=lambda n, d: "<other@planner>")
                refuse_double_claims(session, [(ids[0], taken, [entry])], ids[0])
            outcome.append(None)
        except EntriesTaken as refused:
            outcome.append(refused)

    choose = batch_choice.choose_batch
    thread = threading.Thread(target=rival)

    def choose_while_a_rival_tries(*args: Any) -> Any:
        batch = choose(*args)
        thread.start()
        thread.join(timeout=1.0)
        assert thread.is_alive(), "the rival wrote while the batch held what it had read"
        return batch

    monkeypatch.setattr(planner, "choose_batch", choose_while_a_rival_tries)
    report = plan(factory, cfg, RULES, now=START, all_due=True)
    thread.join(timeout=10)
    assert len(report.planned) == 5 and isinstance(outcome[0], EntriesTaken)
    claimed = claims()
    with factory() as session:
        pairs = session.execute(select(claimed.c.subscriber_id, claimed.c.entry_id)).all()
    assert len(pairs) == len(set(pairs)) == 5 * 5


def test_two_planners_writing_for_one_reader_take_turns(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """Two transactions give one reader the same entry at once: the second waits for
    the first (a row lock on PostgreSQL, the write lock on SQLite), then sees its claim
    and refuses; without the wait both checks would pass before either committed."""
    import threading

    from bot.domain import DigestKind
    from bot.store.ledger import EntriesTaken, NewDigest, Planned, insert_digests, lock_subscribers
    from bot.store.sent import refuse_double_claims as refuse

    cfg = settings_for(tmp_path)
    save(factory, cfg, [clean_fields("ada@example.org")], START - timedelta(days=1))
    ingest_bytes(factory, dump_text(1, seed=1).encode(), name="d", now=START - timedelta(hours=1), rules=RULES)
    with factory() as session:
        ada = session.scalar(select(SubscriberRow.id))
        entry = session.scalar(select(Entry.id))

    def write(tag: str) -> None:
        # Bodies of their own (the why line differs): a shared body's key would make them wait anyway.
        item = Planned(entry, None, tag, (), "u")
        digest = NewDigest(ada, START.date(), DigestKind.MANUAL, DigestState.QUEUED, [item], 0)
        with transaction(factory) as session:
            lock_subscribers(session, [ada])
            ids = insert_digests(session, [digest], now=START, message_id=lambda n, d: f"<{tag}@planner>")
            refuse(session, [(ids[0], ada, [entry])], ids[0])
            if tag == "first":
                second.start()
                second.join(timeout=1.0)
                assert second.is_alive(), "the second writer did not wait for the first"

    outcome: list[BaseException] = []

    def second_writer() -> None:
        try:
            write("second")
        except BaseException as exc:  # noqa: BLE001 - the thread's outcome is the test's
            outcome.append(exc)

    second = threading.Thread(target=second_writer)
    write("first")
    second.join(timeout=30)
    assert [type(e) for e in outcome] == [EntriesTaken]
    with factory() as session:
        assert [d.message_id for d in session.scalars(select(Digest))] == ["<first@planner>"]


def test_purging_a_subscriber_removes_their_claims_and_no_one_elses(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """Claims are the digests' bodies: a purged reader's go with their digests, and a
    body the others share stays theirs."""
    from bot.subscribers.subscriptions import remove

    cfg = settings_for(tmp_path)
    save(factory, cfg, [clean_fields(f"r{i}@example.org") for i in range(3)], START - timedelta(days=1))
    ingest_bytes(factory, dump_text(5, seed=1).encode(), name="d", now=START - timedelta(hours=1), rules=RULES)
    assert len(plan(factory, cfg, RULES, now=START, all_due=True).planned) == 3
    with factory() as session:
        ids = {s.email: s.id for s in list_subscribers(session)}
        before = {sid: claimed_entry_ids(session, sid) for sid in ids.values()}
    assert all(len(entries) == 5 for entries in before.values())
    remove(factory, "r1@example.org", purge=True, now=START)
    claimed = claims()
    with factory() as session:
        rows = session.execute(select(claimed.c.subscriber_id, claimed.c.entry_id)).all()
    assert {sid for sid, _ in rows} == {ids["r0@example.org"], ids["r2@example.org"]}
    assert len(rows) == 10


def test_claimed_rows_read_per_entry_or_through_digests_agree(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """``claimed_from`` reads a short window per entry and a long one through the
    subscribers' digests; both must find what the digests' bodies claim in the window."""
    cfg = settings_for(tmp_path, digest={"max_entries": 3})
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
        entry_ids = sorted(session.scalars(select(claims().c.entry_id).distinct()))
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


def test_left_overs_roll_over_for_max_age_days_and_then_the_window_stops_growing(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """A reader who matches more every day than a digest holds gets the best of the last
    ``digest.max_age_days``: older left-overs are dropped, not promised, and each day's
    planning reads that many days of entries, not their whole history."""
    from bot.store.subscribers import watermarks

    cfg = settings_for(tmp_path, digest={"max_entries": 2, "max_age_days": 3})
    save(factory, cfg, [clean_fields("heavy@example.org", filter="*", backfill="0d")], START - timedelta(hours=2))
    for day in range(8):
        now = START + timedelta(days=day)
        ingest_bytes(factory, dump_text(5, seed=day, start=day * 100).encode(), name=f"d{day}", now=now, rules=RULES)
        plan(factory, cfg, RULES, now=now + timedelta(hours=1), all_due=True)
        with factory() as session:
            reader = list_subscribers(session)[0]
            mark = watermarks(session, [reader.id])[reader.id][0]
        assert mark >= now + timedelta(hours=1) - timedelta(days=3), f"day {day}: the window reaches back to {mark}"
    claimed = claims()
    with factory() as session:
        query = (
            select(Digest.planned_at, Entry.first_seen_at)
            .select_from(claimed)
            .join(Entry, Entry.id == claimed.c.entry_id)
            .join(Digest, Digest.id == claimed.c.digest_id)
        )
        ages = [planned - seen for planned, seen in session.execute(query)]
    assert len(ages) == 16  # two a day, every day: the backlog never runs dry
    assert max(ages) <= timedelta(days=3, hours=1), max(ages)  # nothing older than max_age_days (and the margin)


# --- the open day: the real planner run every simulated minute ------------------------

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham"]
# Starts around DST changes (Berlin and New York spring forward and fall back, Lord Howe
# by half an hour) and on an ordinary day, so simulated days cross them.
STARTS = [
    datetime(2026, 3, 28, 20, tzinfo=UTC),
    datetime(2026, 3, 7, 20, tzinfo=UTC),
    datetime(2026, 10, 24, 20, tzinfo=UTC),
    datetime(2026, 10, 31, 20, tzinfo=UTC),
    datetime(2026, 4, 4, 12, tzinfo=UTC),
    datetime(2026, 11, 23, 5, tzinfo=UTC),
]
SPAN_MINUTES = 26 * 60

open_day_cases = st.fixed_dictionaries(
    {
        "start": st.sampled_from(STARTS),
        "close_hour": st.sampled_from([24, 22, 0]),
        "people": st.lists(
            st.tuples(st.sampled_from(ZONES), st.integers(0, 23), st.sampled_from(["*", "cs.LG", "cs.CL"])),
            min_size=1,
            max_size=3,
        ),
        # (minute of arrival, the tag every entry of the dump carries)
        "dumps": st.lists(st.tuples(st.integers(0, SPAN_MINUTES - 1), st.sampled_from(["cs.LG", "cs.CL"])), max_size=4),
    }
)


def _pass_minutes(arrivals: Iterable[int]) -> list[int]:
    """The minutes of the span a pass can change anything at: each quarter hour (every
    zone above starts its local hours on one, so every send time and day's close is one)
    and each dump's arrival.  The daemon plans every minute; the passes in between find
    what the last one found (`make soak` plans every minute, as the daemon does)."""
    return sized(sorted(set(range(0, SPAN_MINUTES, 15)) | set(arrivals)), list(range(SPAN_MINUTES)))


def _open_day_run(folder: Path, case: dict) -> None:
    engine = make_engine(f"sqlite:///{folder / 'store.sqlite3'}")
    upgrade(engine)
    factory = sessions(engine)
    cfg = settings_for(folder, digest={"max_entries": 100}, schedule={"day_closes_hour": case["close_hour"]})
    start: datetime = case["start"]
    people = [
        clean_fields(f"r{i}@example.org", timezone=zone, send_hour=hour, filter=text)
        for i, (zone, hour, text) in enumerate(case["people"])
    ]
    save(factory, cfg, people, start - timedelta(days=1))
    arrivals: dict[int, list[tuple[int, str]]] = {}
    for n, (minute, tag) in enumerate(case["dumps"]):
        arrivals.setdefault(minute, []).append((n, tag))
    for minute in _pass_minutes(arrivals):
        now = start + timedelta(minutes=minute)
        for n, tag in arrivals.get(minute, []):
            papers = [(f"Dump {n} paper {k}", ["Ada"], now.date(), f"About {tag}.") for k in range(2)]
            ingest_bytes(factory, render_dump(papers, [tag]).encode(), name=f"dump-{n}", now=now, rules=RULES)
        plan(factory, cfg, RULES, now=now)
    _check_open_days(factory, case, start)
    engine.dispose()


def _check_open_days(factory: sessionmaker[Session], case: dict, start: datetime) -> None:
    end = start + timedelta(minutes=SPAN_MINUTES)
    with factory() as session:
        subscribers = {s.email: s for s in list_subscribers(session)}
        digests = session.execute(
            select(Digest.id, Digest.subscriber_id, Digest.local_date, Digest.state, Digest.planned_at)
        ).all()
        claimed = claims()
        carried = {
            (sid, title): digest_id
            for sid, title, digest_id in session.execute(
                select(claimed.c.subscriber_id, Entry.title, claimed.c.digest_id).join(
                    Entry, Entry.id == claimed.c.entry_id
                )
            )
        }
    days = [(d.subscriber_id, d.local_date) for d in digests]
    assert len(days) == len(set(days)), "two scheduled digests for one subscriber and day"
    sent = {d.id: d for d in digests if d.state != DigestState.EMPTY.value}
    for email, subscriber in subscribers.items():
        zone = ZoneInfo(subscriber.timezone)
        mine = [d for d in sent.values() if d.subscriber_id == subscriber.id]
        for n, (minute, tag) in enumerate(case["dumps"]):
            arrived = start + timedelta(minutes=minute)
            day = arrived.astimezone(zone).date()
            closes = closes_at(
                day, send_hour=subscriber.send_hour, close_hour=case["close_hour"], timezone=subscriber.timezone
            )
            went_earlier = any(d.local_date == day and _utc(d.planned_at) < arrived for d in mine)
            # A day first planned once it closed (at its send time when the close hour is not
            # later, or late: the bot was not running) goes out with all that arrived by then.
            planned_late = any(d.local_date == day and arrived <= _utc(d.planned_at) >= closes for d in mine)
            open_then = arrived < closes or planned_late
            expected_day = day if open_then and not went_earlier else day + timedelta(days=1)
            send_at = local_time(expected_day, subscriber.send_hour, subscriber.timezone)
            for k in range(2):
                digest_id = carried.get((subscriber.id, f"Dump {n} paper {k}"))
                where = f"{email} ({subscriber.timezone}, {subscriber.send_hour}h), dump {n} at {arrived:%m-%d %H:%M}"
                if subscriber.filter.casefold() not in ("*", tag.casefold()):
                    assert digest_id is None, f"{where}: carried though the filter does not match"
                elif max(send_at, arrived) >= end:
                    assert digest_id is None or sent[digest_id].local_date == expected_day, where
                else:
                    assert digest_id is not None, f"{where}: never sent (expected on {expected_day})"
                    assert sent[digest_id].local_date == expected_day, f"{where}: sent on the wrong day"


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@settings(max_examples=12, deadline=None)
@given(case=open_day_cases)
# A dump that lands in the minute a day closes at its send time goes out that day.
@example(case={"start": STARTS[0], "close_hour": 0, "people": [("America/New_York", 16, "*")], "dumps": [(0, "cs.LG")]})
@pytest.mark.slow
@pytest.mark.soak
def test_a_day_stays_open_until_it_has_carried_something(tmp_path_factory, case: dict) -> None:
    _open_day_run(tmp_path_factory.mktemp("open"), case)


@pytest.mark.slow
@pytest.mark.soak
def test_a_dump_after_the_send_hour_goes_out_that_day(tmp_path: Path) -> None:
    """The issue's scenario, and its neighbours: the day closes, a second dump waits."""
    case = {
        "start": datetime(2026, 11, 23, 7, 55, tzinfo=UTC),
        "close_hour": 24,
        "people": [("UTC", 8, "*"), ("Europe/Berlin", 9, "cs.LG"), ("Asia/Kolkata", 13, "cs.CL")],
        # 08:47 UTC: after every send time; 10:00: after the first digests went out;
        # 23:30 UTC: after Kolkata's midnight, before the others'.
        "dumps": [(52, "cs.LG"), (125, "cs.CL"), (935, "cs.LG"), (935, "cs.CL")],
    }
    _open_day_run(tmp_path, case)


def test_the_send_time_waits_for_the_days_dump(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.sqlite3'}")
    upgrade(engine)
    factory = sessions(engine)
    cfg = settings_for(tmp_path, schedule={"wait_for_dump_minutes": 30}, digest={"max_entries": 2})
    day1 = datetime(2026, 11, 23, 8, tzinfo=UTC)
    save(factory, cfg, [clean_fields("ada@example.org", timezone="UTC", send_hour=8)], day1 - timedelta(days=1))

    def dump(n: int, at: datetime, count: int = 1) -> None:
        papers = [(f"Paper {n}.{k}", ["Ada"], at.date(), "About it.") for k in range(count)]
        ingest_bytes(factory, render_dump(papers).encode(), name=f"dump-{n}", now=at, rules=RULES)

    def planned(at: datetime) -> tuple[int, int]:
        report = plan(factory, cfg, RULES, now=at)
        return len(report.planned), report.waiting

    # No digest yet: nothing to wait for, the first day goes at its send time, and
    # one of its three entries is left for the next digest.
    dump(0, day1 - timedelta(hours=2), count=3)
    assert planned(day1) == (1, 0)
    day2 = day1 + timedelta(days=1)
    assert planned(day2) == (0, 1)
    assert planned(day2 + timedelta(minutes=10)) == (0, 1)
    dump(2, day2 + timedelta(minutes=12))  # the day's dump
    assert planned(day2 + timedelta(minutes=12)) == (1, 0)
    with factory() as session:
        titles = session.scalars(select(Entry.title).where(Entry.id.in_(digest_entry_ids(session, 2)))).all()
    assert len(titles) == 2 and "Paper 2.0" in titles  # the leftover and the day's dump in one mail, not two
    # No dump on day three: after the wait the day is planned anyway (nothing left: empty).
    day3 = day2 + timedelta(days=1)
    assert planned(day3 + timedelta(minutes=29)) == (0, 1)
    assert planned(day3 + timedelta(minutes=30)) == (0, 0)
    with factory() as session:
        assert session.scalar(select(Digest.state).where(Digest.local_date == day3.date())) == "empty"
    engine.dispose()
