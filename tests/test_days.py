"""The rules of a subscriber's local day (bot.plan.days), alone: no store, no clock."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from bot.domain import DigestState, ScheduledDay
from bot.plan.days import (
    RECHECK_MARGIN,
    DayFacts,
    DayStep,
    day_step,
    day_story,
    local_time,
    local_today,
    waits_for_dump,
)

NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
CLOSES = datetime(2026, 11, 24, 0, 0, tzinfo=UTC)


def _empty(at: datetime, checked: datetime | None = None) -> ScheduledDay:
    return ScheduledDay(7, DigestState.EMPTY, at, checked or at)


def test_a_day_without_a_digest_is_planned() -> None:
    assert day_step(None, now=NOON, closes_at=CLOSES, latest_entry_at=None) is DayStep.PLAN


@pytest.mark.parametrize("state", [s for s in DigestState if s is not DigestState.EMPTY])
def test_a_day_with_a_digest_is_final(state: DigestState) -> None:
    record = ScheduledDay(7, state, None, None)
    assert day_step(record, now=NOON, closes_at=CLOSES, latest_entry_at=NOON) is DayStep.SKIP


def test_an_empty_day_is_looked_at_again_only_when_entries_arrived_since() -> None:
    looked = NOON - timedelta(hours=4)
    record = _empty(looked)
    assert day_step(record, now=NOON, closes_at=CLOSES, latest_entry_at=None) is DayStep.SKIP
    old = looked - RECHECK_MARGIN - timedelta(seconds=1)
    assert day_step(record, now=NOON, closes_at=CLOSES, latest_entry_at=old) is DayStep.SKIP
    # An ingest that began a little before the last look may have committed after it.
    late_commit = looked - RECHECK_MARGIN + timedelta(seconds=1)
    assert day_step(record, now=NOON, closes_at=CLOSES, latest_entry_at=late_commit) is DayStep.RECHECK
    assert day_step(record, now=NOON, closes_at=CLOSES, latest_entry_at=NOON) is DayStep.RECHECK


def test_an_empty_day_closes() -> None:
    record = _empty(NOON - timedelta(hours=4))
    assert day_step(record, now=CLOSES, closes_at=CLOSES, latest_entry_at=CLOSES) is DayStep.SKIP
    before = CLOSES - timedelta(seconds=1)
    assert day_step(record, now=before, closes_at=CLOSES, latest_entry_at=before) is DayStep.RECHECK


def test_the_wait_for_the_dump() -> None:
    send = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
    yesterday = send - timedelta(days=1)
    wait = timedelta(minutes=30)
    args = {"send_at": send, "wait": wait, "last_digest_at": yesterday}
    assert waits_for_dump(now=send, latest_dump_at=yesterday - timedelta(hours=1), **args)
    assert waits_for_dump(now=send, latest_dump_at=None, **args)
    assert not waits_for_dump(now=send, latest_dump_at=yesterday + timedelta(hours=20), **args)
    assert not waits_for_dump(now=send + wait, latest_dump_at=None, **args)
    assert not waits_for_dump(now=send, latest_dump_at=None, send_at=send, wait=timedelta(0), last_digest_at=yesterday)
    assert not waits_for_dump(now=send, latest_dump_at=None, send_at=send, wait=wait, last_digest_at=None)


def test_local_times_across_dst_changes() -> None:
    # Berlin skips 02:00-03:00 on 2026-03-29 and repeats 02:00-03:00 on 2026-10-25.
    assert local_time(date(2026, 3, 29), 2, "Europe/Berlin") == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert local_time(date(2026, 10, 25), 2, "Europe/Berlin") == datetime(2026, 10, 25, 0, 0, tzinfo=UTC)
    # Hour 24 is the next local midnight, whatever the day's length.
    assert local_time(date(2026, 3, 29), 24, "Europe/Berlin") == datetime(2026, 3, 29, 22, 0, tzinfo=UTC)
    assert local_time(date(2026, 10, 25), 24, "Europe/Berlin") == datetime(2026, 10, 25, 23, 0, tzinfo=UTC)
    assert local_time(date(2026, 11, 23), 24, "Asia/Kolkata") == datetime(2026, 11, 23, 18, 30, tzinfo=UTC)
    assert local_today("Pacific/Kiritimati", datetime(2026, 11, 23, 11, 0, tzinfo=UTC)) == date(2026, 11, 24)


def _facts(**kw: object) -> DayFacts:
    base: dict[str, object] = {
        "local_date": date(2026, 11, 23),
        "state": DigestState.SENT,
        "planned_at": datetime(2026, 11, 23, 8, 0, 5, tzinfo=UTC),
        "sent_at": datetime(2026, 11, 23, 8, 0, 9, tzinfo=UTC),
        "nothing_at": None,
        "arrived": None,
    }
    return DayFacts(**{**base, **kw})  # type: ignore[arg-type]  # the test's own defaults


def test_the_story_of_a_day() -> None:
    tell = {"timezone": "UTC", "closes_at": CLOSES}
    assert day_story(_facts(), now=NOON, **tell) == "sent at 08:00"
    assert day_story(_facts(mailed=False), now=NOON, **tell) == "in the feed at 08:00"  # cadence "feed"
    late = _facts(
        nothing_at=datetime(2026, 11, 23, 8, 0, tzinfo=UTC),
        planned_at=datetime(2026, 11, 23, 8, 47, tzinfo=UTC),
        sent_at=datetime(2026, 11, 23, 8, 47, 30, tzinfo=UTC),
        arrived="seeds/003.txt",
    )
    assert day_story(late, now=NOON, **tell) == "nothing at 08:00; sent at 08:47 after seeds/003.txt arrived"
    empty = _facts(state=DigestState.EMPTY, sent_at=None, nothing_at=datetime(2026, 11, 23, 8, 0, tzinfo=UTC))
    assert day_story(empty, now=NOON, **tell) == "nothing new at 08:00; open until 24:00"
    assert day_story(empty, now=CLOSES, **tell) == "nothing new that day"
    queued = _facts(state=DigestState.QUEUED, sent_at=None)
    assert day_story(queued, now=NOON, **tell) == "planned at 08:00, queued"
    # Local times, in the subscriber's zone; another day's time says its date.
    assert day_story(_facts(), now=NOON, timezone="Asia/Kolkata", closes_at=CLOSES) == "sent at 13:30"
    assert day_story(_facts(), now=NOON, timezone="Pacific/Honolulu", closes_at=CLOSES) == "sent at 2026-11-22 22:00"
    # Lists of several subscribers (history) say each time's zone.
    mixed = {"now": NOON, "closes_at": CLOSES, "zone": True}
    assert day_story(_facts(), timezone="UTC", **mixed) == "sent at 08:00 UTC"
    assert day_story(_facts(), timezone="Asia/Kolkata", **mixed) == "sent at 13:30 IST"
    assert day_story(_facts(), timezone="America/Los_Angeles", **mixed) == "sent at 00:00 PST"
    assert day_story(empty, timezone="UTC", **mixed) == "nothing new at 08:00 UTC; open until 24:00 UTC"
