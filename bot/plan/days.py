"""Plan stage: the rules of a subscriber's local day, as pure functions.

A day opens at the subscriber's send time.  If the planner finds nothing new
for them then, the day stays open until ``schedule.day_closes_hour`` (local):
entries that arrive meanwhile still go out that day, in the day's one
scheduled digest.  ``schedule.wait_for_dump_minutes`` can hold the send
time back for a dump newer than the subscriber's last digest.  These
functions also tell the story of a day for ``history`` and ``preview``.
Never reads the store and never reads the clock: the caller passes ``now``.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum

from bot.domain import DigestState, ScheduledDay

# An ingest's entries carry the time it began and become visible when it commits:
# an empty day is looked at again while entries this much older than the last look
# are the newest, so an ingest that committed just after a look is not missed.
RECHECK_MARGIN = timedelta(minutes=5)


def local_today(timezone: str, now: datetime) -> date:
    return now.astimezone(zoneinfo.ZoneInfo(timezone)).date()


def local_time(day: date, hour: int, timezone: str) -> datetime:
    """*day* at *hour* (0-24; 24 is the next midnight) in *timezone*, as UTC.

    A local time that a DST change skips maps forward by the gap; one it
    repeats takes its first occurrence."""
    zone = zoneinfo.ZoneInfo(timezone)
    moment = datetime.combine(day + timedelta(days=hour // 24), time(hour % 24), tzinfo=zone)
    return moment.astimezone(UTC)


class DayStep(StrEnum):
    PLAN = "plan"  # no digest for the day yet: plan one
    RECHECK = "recheck"  # the day is empty and open, and entries arrived since the last look
    SKIP = "skip"  # the day has its digest, or is closed, or nothing arrived since the last look


def day_step(
    record: ScheduledDay | None, *, now: datetime, closes_at: datetime, latest_entry_at: datetime | None
) -> DayStep:
    """What the planner does about a due subscriber's day."""
    if record is None:
        return DayStep.PLAN
    if record.state is not DigestState.EMPTY or now >= closes_at:
        return DayStep.SKIP
    last_look = record.checked_at or record.nothing_at
    if latest_entry_at is None or (last_look is not None and latest_entry_at < last_look - RECHECK_MARGIN):
        return DayStep.SKIP
    return DayStep.RECHECK


def waits_for_dump(
    *,
    now: datetime,
    send_at: datetime,
    wait: timedelta,
    last_digest_at: datetime | None,
    latest_dump_at: datetime | None,
) -> bool:
    """Whether a due subscriber's first look at the day waits for the producer: for up to
    *wait* past the send time, while no dump with new entries has arrived since their
    last scheduled digest was planned.  A subscriber with no digest yet never waits."""
    if wait <= timedelta(0) or last_digest_at is None or now >= send_at + wait:
        return False
    return latest_dump_at is None or latest_dump_at <= last_digest_at


def closes_at(day: date, *, send_hour: int, close_hour: int, timezone: str) -> datetime:
    """When a subscriber's *day* closes: ``close_hour`` local, never before the send time
    (a close hour at or before the send hour makes the day final at the send time)."""
    return max(local_time(day, close_hour, timezone), local_time(day, send_hour, timezone))


@dataclass(frozen=True, slots=True)
class DayFacts:
    """One scheduled digest as ``day_story`` tells it."""

    local_date: date
    state: DigestState
    planned_at: datetime
    sent_at: datetime | None
    nothing_at: datetime | None
    arrived: str | None  # the dump whose entries filled a day that was empty at first
    mailed: bool = True  # False: sent into the reader's feed, never mailed (cadence ``feed``)


def day_story(facts: DayFacts, *, timezone: str, closes_at: datetime, now: datetime, zone: bool = False) -> str:
    """A scheduled day in a few words, local times: "sent at 08:00", "nothing at 08:00;
    sent at 08:47 after seeds/a.txt arrived", "nothing new (open until 24:00)".
    *zone*: each time with its zone's abbreviation ("08:00 CET"), for lists that mix
    subscribers of several zones."""
    shown = " %Z" if zone else ""

    def at(moment: datetime) -> str:
        local = moment.astimezone(zoneinfo.ZoneInfo(timezone))
        return local.strftime(("%H:%M" if local.date() == facts.local_date else "%Y-%m-%d %H:%M") + shown)

    if facts.state is DigestState.EMPTY:
        if now < closes_at:
            close = closes_at.astimezone(zoneinfo.ZoneInfo(timezone))
            midnight = close.date() > facts.local_date and close.hour == 0
            until = close.strftime(("24:00" if midnight else "%H:%M") + shown)
            return f"nothing new at {at(facts.nothing_at or facts.planned_at)}; open until {until}"
        return "nothing new that day"
    outcome = _outcome(facts, at)
    if facts.nothing_at is None:
        return outcome
    after = f" after {facts.arrived} arrived" if facts.arrived else ""
    return f"nothing at {at(facts.nothing_at)}; {outcome}{after}"


def _outcome(facts: DayFacts, at: Callable[[datetime], str]) -> str:
    if facts.state is DigestState.SENT and facts.sent_at is not None:
        return f"sent at {at(facts.sent_at)}" if facts.mailed else f"in the feed at {at(facts.sent_at)}"
    if facts.state is DigestState.FAILED:
        return f"planned at {at(facts.planned_at)}, failed"
    if facts.state is DigestState.CANCELLED:
        return f"planned at {at(facts.planned_at)}, cancelled"
    if facts.state is DigestState.UNKNOWN:
        return f"planned at {at(facts.planned_at)}, went on the wire, no answer seen (unknown)"
    return f"planned at {at(facts.planned_at)}, {facts.state.value.replace('_', ' ')}"


def today_note(
    today: DayFacts | None,
    *,
    timezone: str,
    send_at: datetime,
    closes_at: datetime,
    now: datetime,
    sends_today: bool = True,
) -> str:
    """When the entries a preview lists would go out, given today's scheduled digest.
    *send_at* is the next send time: today's while today's digest is not planned,
    else the next day the subscriber's cadence sends on (*sends_today*: whether
    their cadence sends today at all)."""
    zone = zoneinfo.ZoneInfo(timezone)
    day = now.astimezone(zone).date()
    local_send = send_at.astimezone(zone)
    if local_send.date() == day + timedelta(days=1):
        later = f"with tomorrow's digest at {local_send:%H:%M}"
    else:
        later = f"with the next digest, {local_send:%A %d %B} at {local_send:%H:%M}"
    if not sends_today:
        return f"today ({day}): no digest on this day of the week; these go out {later}"
    if today is None:
        if now < send_at:
            return f"today ({day}): not planned yet; these go out at {local_send:%H:%M}"
        return f"today ({day}): due now; the planner takes these within a minute"
    story = day_story(today, timezone=timezone, closes_at=closes_at, now=now)
    if today.state is DigestState.EMPTY and now < closes_at:
        return f"today ({day}): {story}; these go out as soon as the planner sees them"
    return f"today ({day}): {story}; these go out {later}"
