"""Cadence: the pure rules, and the real planner run every simulated hour over DST
changes, zones at both ends of the day and cadence changes, against the definition:

- a scheduled digest only on a local day the subscriber's cadence (when it was
  planned) sends on, at or after their local send hour, at most one a day;
- each digest holds what ``select_for`` over the whole window, less everything
  ever claimed for them, gives at that moment (the best ``max_entries``);
- no entry reaches a subscriber twice, and once everyone is daily again every
  matching entry has reached them: a change of cadence loses nothing.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import DigestKind
from bot.ingest.storing import ingest_bytes
from bot.plan import IdRuns, plan
from bot.plan.cadence import (
    CHOICES,
    CadenceError,
    clean_cadence,
    describe,
    mails,
    next_send_day,
    send_days,
    sends_on,
)
from bot.store.engine import make_engine, sessions, upgrade
from bot.store.schema import Digest
from bot.store.subscribers import list_subscribers
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import SubscriberFields, edit, save
from tests.conftest import ROOT
from tests.helpers import claims, digest_entry_ids, expected_digests, render_dump, settings_for, sized

RULES = load_rules(ROOT / "config" / "tags.toml")


# --- the pure rules ------------------------------------------------------------------


def test_cadences_are_spelled_one_way_and_say_what_they_do() -> None:
    assert clean_cadence(" Weekly: Monday ") == "weekly:mon"
    assert clean_cadence("WEEKDAYS") == "weekdays" and clean_cadence("daily") == "daily"
    for bad, said in [
        ("weekly", "needs its day"),
        ("weekly:funday", "'funday' is not a day"),
        ("hourly", "is not daily"),
    ]:
        with pytest.raises(CadenceError, match=said):
            clean_cadence(bad)
    said = [describe(c) for c in ("daily", "weekdays", "weekly:sun", "feed")]
    assert said == ["every day", "Monday to Friday", "every Sunday", "every day, in a feed only (no mail)"]
    assert clean_cadence(" Feed ") == "feed" and send_days("feed") == frozenset(range(7))
    assert [mails(c) for c in ("daily", "weekly:sun", "feed")] == [True, True, False]
    assert send_days("weekdays") == frozenset(range(5)) and send_days("weekly:wed") == frozenset({2})


@given(st.sampled_from(CHOICES), st.dates(date(2000, 1, 1), date(2100, 1, 1)))
def test_the_next_send_day_is_the_first_day_that_sends(cadence: str, day: date) -> None:
    found = next_send_day(cadence, day)
    assert sends_on(cadence, found) and day <= found < day + timedelta(days=7)
    assert not any(sends_on(cadence, day + timedelta(days=n)) for n in range((found - day).days))
    assert clean_cadence(cadence) == cadence


# --- the planner, every simulated hour --------------------------------------------------

# Both ends of the day (UTC+14 and UTC-11), and zones with DST changes in the spans below.
ZONES = ["Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]
STARTS = [
    datetime(2026, 3, 25, 0, tzinfo=UTC),  # Berlin springs forward on the 29th
    datetime(2026, 10, 21, 0, tzinfo=UTC),  # Berlin falls back on the 25th, New York on 1 November
    datetime(2026, 4, 1, 0, tzinfo=UTC),  # Lord Howe falls back half an hour on the 5th
]
DAYS = 10

cadence_cases = st.fixed_dictionaries(
    {
        "start": st.sampled_from(STARTS),
        "max_entries": st.integers(1, 4),
        "people": st.lists(
            st.tuples(st.sampled_from(ZONES), st.integers(0, 23), st.sampled_from(CHOICES)), min_size=1, max_size=4
        ),
        # (hour of the span, person, new cadence)
        "changes": st.lists(st.tuples(st.integers(0, DAYS * 24 - 1), st.integers(0, 3), st.sampled_from(CHOICES))),
        # (hour of the span, entries in the dump)
        "dumps": st.lists(st.tuples(st.integers(0, DAYS * 24 - 1), st.integers(1, 5)), min_size=1, max_size=8),
    }
)


def _run(folder: Path, case: dict) -> None:
    engine = make_engine(f"sqlite:///{folder / 'store.sqlite3'}")
    upgrade(engine)
    factory = sessions(engine)
    # Left-overs roll over until they arrive (the drain below takes up to 40 days at one a day).
    digest = {"max_entries": case["max_entries"], "max_age_days": 3650}
    cfg = settings_for(folder, digest=digest)
    start: datetime = case["start"]
    people = [
        clean_fields(f"r{i}@example.org", timezone=zone, send_hour=hour, cadence=cadence, filter="*", backfill="0d")
        for i, (zone, hour, cadence) in enumerate(case["people"])
    ]
    save(factory, cfg, people, start - timedelta(hours=1))
    cadence_of = {p.email: p.cadence for p in people}
    dumps: dict[int, list[int]] = {}
    for n, (hour, _count) in enumerate(case["dumps"]):
        dumps.setdefault(hour, []).append(n)
    changes: dict[int, list[tuple[int, str]]] = {}
    for hour, who, cadence in case["changes"]:
        changes.setdefault(hour, []).append((who % len(people), cadence))
    for hour in range(DAYS * 24):
        now = start + timedelta(hours=hour)
        for n in dumps.get(hour, []):
            count = case["dumps"][n][1]
            papers = [(f"Dump {n} paper {k}", ["Ada"], now.date(), "About it.") for k in range(count)]
            ingest_bytes(factory, render_dump(papers).encode(), name=f"dump-{n}", now=now, rules=RULES)
        for who, cadence in changes.get(hour, []):
            email = people[who].email
            edit(factory, cfg, SubscriberFields(email=email, cadence=cadence), now)
            cadence_of[email] = cadence
        expected = _definition(factory, cfg, now)
        report = plan(factory, cfg, RULES, now=now)
        _check_pass(factory, report.planned, expected, cadence_of, now)
    # Everyone daily again for two days, with room for every entry (at the case's own
    # room, up to 40 days of passes): whatever was waiting arrives, nothing twice.
    for person in people:
        edit(factory, cfg, SubscriberFields(email=person.email, cadence="daily"), now)
    drain = settings_for(folder, digest=digest | {"max_entries": sized(100, case["max_entries"])})
    for hour in range(DAYS * 24, DAYS * 24 + 48 * max(1, 20 // drain.digest.max_entries)):
        plan(factory, drain, RULES, now=start + timedelta(hours=hour))
    with factory() as session:
        claimed = claims()
        delivered = session.execute(select(claimed.c.subscriber_id, claimed.c.entry_id)).all()
        total = sum(count for _, count in case["dumps"])
        for subscriber in list_subscribers(session):
            mine = [entry for sid, entry in delivered if sid == subscriber.id]
            assert len(mine) == len(set(mine)) == total, f"{subscriber.email}: {len(mine)} of {total} entries"
    engine.dispose()


def _definition(factory: sessionmaker[Session], cfg: Settings, now: datetime) -> dict[int, list[int]]:
    return expected_digests(factory, cfg, now, RULES)


def _check_pass(
    factory: sessionmaker[Session],
    planned: IdRuns,
    expected: dict[int, list[int]],
    cadence_of: dict[str, str],
    now: datetime,
) -> None:
    ids = list(planned)
    if not ids:
        return
    with factory() as session:
        people = {s.id: s for s in list_subscribers(session)}
        for digest in session.scalars(select(Digest).where(Digest.id.in_(ids))):
            subscriber = people[digest.subscriber_id]
            local = now.astimezone(ZoneInfo(subscriber.timezone))
            cadence = cadence_of[subscriber.email]
            where = f"{subscriber.email} ({subscriber.timezone}, {subscriber.send_hour}h, {cadence})"
            assert digest.kind == DigestKind.SCHEDULED.value
            assert digest.local_date == local.date(), f"{where}: planned for another day at {local}"
            assert sends_on(cadence_of[subscriber.email], digest.local_date), f"{where}: {local:%A} is not a send day"
            assert local.hour >= subscriber.send_hour or local.date() != digest.local_date, f"{where}: early at {local}"
            got = digest_entry_ids(session, digest.id)
            assert got == expected[subscriber.id], f"{where} at {now}"
        days = session.execute(select(Digest.subscriber_id, Digest.local_date)).all()
        assert len(days) == len(set(days)), "two scheduled digests for one subscriber and day"


@settings(max_examples=10, deadline=None)
@given(case=cadence_cases)
@pytest.mark.slow
@pytest.mark.soak
def test_the_planner_keeps_each_cadence_over_dst_and_changes(tmp_path_factory, case: dict) -> None:
    _run(tmp_path_factory.mktemp("cadence"), case)


@pytest.mark.slow
def test_weekly_weekdays_and_daily_readers_across_the_berlin_spring_change(tmp_path: Path) -> None:
    """One hand-picked case for the fast tier: every cadence, both ends of the day, a
    cadence change mid-week, dumps on a weekend."""
    case = {
        "start": STARTS[0],
        "max_entries": 2,
        "people": [
            ("Europe/Berlin", 2, "weekly:sun"),  # 02:00 on 29 March does not exist in Berlin
            ("Pacific/Kiritimati", 0, "weekdays"),
            ("Pacific/Pago_Pago", 23, "daily"),
            ("America/New_York", 8, "weekly:mon"),
        ],
        "changes": [(60, 3, "weekdays"), (100, 0, "daily"), (150, 2, "weekly:thu")],
        "dumps": [(3, 3), (80, 4), (95, 2), (130, 5), (200, 1)],
    }
    _run(tmp_path, case)


def test_preview_says_when_the_next_digest_of_a_cadence_goes_out() -> None:
    from bot.plan.days import local_time, today_note

    wednesday = datetime(2026, 11, 25, 12, tzinfo=UTC)
    monday = local_time(next_send_day("weekly:mon", wednesday.date()), 8, "Europe/Berlin")
    note = today_note(
        None,
        timezone="Europe/Berlin",
        send_at=monday,
        closes_at=wednesday,
        now=wednesday,
        sends_today=sends_on("weekly:mon", wednesday.date()),
    )
    assert note == (
        "today (2026-11-25): no digest on this day of the week; "
        "these go out with the next digest, Monday 30 November at 08:00"
    )
    tomorrow = local_time(wednesday.date() + timedelta(days=1), 8, "UTC")
    assert today_note(
        None, timezone="UTC", send_at=tomorrow, closes_at=wednesday, now=wednesday, sends_today=False
    ) == ("today (2026-11-25): no digest on this day of the week; these go out with tomorrow's digest at 08:00")
