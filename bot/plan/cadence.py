"""Plan stage: how often a subscriber gets a digest, as pure rules.

    daily        every day at the send hour (the default)
    weekdays     Monday to Friday; Monday's digest carries the weekend's entries
    weekly:mon   one day a week (mon, tue, wed, thu, fri, sat, sun)
    feed         every day at the send hour, into the reader's Atom feed only:
                 nothing is mailed, and what the feed carried is never sent again

A cadence only says on which local days a subscriber is due.  What a digest
holds is the same rule whatever the cadence: every matching entry not yet
sent to them, best first, up to the cap (the rest rolls over), so a change of
cadence can neither lose nor repeat an entry.  Never reads the store or the clock.
"""

from __future__ import annotations

from datetime import date, timedelta
from functools import cache

DAILY = "daily"
WEEKDAYS = "weekdays"
FEED = "feed"
DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
CHOICES = (DAILY, WEEKDAYS, *(f"weekly:{day}" for day in DAY_NAMES), FEED)


class CadenceError(ValueError):
    """Not a cadence; ``str()`` says what is allowed."""


def clean_cadence(raw: str) -> str:
    """The canonical spelling of *raw*: ``daily``, ``weekdays``, ``weekly:<day>`` or
    ``feed`` (a day's full name and any case are accepted)."""
    text = "".join(raw.split()).lower()
    if text in (DAILY, WEEKDAYS, FEED):
        return text
    kind, colon, day = text.partition(":")
    if kind == "weekly" and colon:
        if day in DAY_NAMES:
            return f"weekly:{day}"
        if day in _FULL_NAMES:
            return f"weekly:{DAY_NAMES[_FULL_NAMES.index(day)]}"
    if kind == "weekly" and colon and day:
        raise CadenceError(f"{raw!r}: {day!r} is not a day (mon, tue, wed, thu, fri, sat or sun)")
    if kind == "weekly":
        raise CadenceError(f"{raw!r}: a weekly digest needs its day, e.g. weekly:mon")
    raise CadenceError(f"{raw!r} is not daily, weekdays, weekly:<day> (e.g. weekly:mon) or feed")


@cache  # asked once per due subscriber and planning pass; there are ten cadences
def send_days(cadence: str) -> frozenset[int]:
    """The weekdays (Monday = 0) a valid cadence sends on."""
    if cadence == WEEKDAYS:
        return frozenset(range(5))
    if cadence.startswith("weekly:"):
        return frozenset({DAY_NAMES.index(cadence.removeprefix("weekly:"))})
    return frozenset(range(7))


def sends_on(cadence: str, day: date) -> bool:
    """Whether a subscriber with *cadence* is due on their local *day*."""
    return day.weekday() in send_days(cadence)


def next_send_day(cadence: str, day: date) -> date:
    """The first local day on or after *day* that *cadence* sends on."""
    days = send_days(cadence)
    return next(day + timedelta(days=n) for n in range(7) if (day + timedelta(days=n)).weekday() in days)


def is_weekly(cadence: str) -> bool:
    return cadence.startswith("weekly:")


def mails(cadence: str) -> bool:
    """Whether a digest of *cadence* is mailed (``feed``: it only goes into the reader's feed)."""
    return cadence != FEED


def describe(cadence: str) -> str:
    """For a person: "every day", "Monday to Friday", "every Monday"."""
    if cadence == FEED:
        return "every day, in a feed only (no mail)"
    if cadence == WEEKDAYS:
        return "Monday to Friday"
    if is_weekly(cadence):
        return "every " + _FULL_NAMES[DAY_NAMES.index(cadence.removeprefix("weekly:"))].capitalize()
    return "every day"
