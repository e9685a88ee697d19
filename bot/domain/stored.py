"""Domain rules: a subscriber's stored settings read as untrusted values.

digestbot writes only settings it has checked, but a store can hold others: a restored
backup someone edited, a hand-made SQL change, a zone a newer time zone database no
longer has.  One such row must cost that reader only, on every path, never planning,
a command or a page for everyone.  So a stored value digestbot never writes reads as a
safe one (a status as ``paused``: held, never mailed; a zone as UTC; an hour as 0; a
cadence as daily; a backfill as none) and the reader carries a *fault* naming the
first such value, which the planner skips and the operator sees.  Pure functions; the
zone database is read through ``zoneinfo`` once per name.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass

from bot.domain import SubscriberStatus

# What digestbot writes (bot.plan.cadence and bot.subscribers.subscriptions spell them).
CADENCES = frozenset(
    {"daily", "weekdays", "feed", *(f"weekly:{day}" for day in ("mon", "tue", "wed", "thu", "fri", "sat", "sun"))}
)
_BACKFILL = re.compile(r"(?:all|\d{1,4}d)")
THRESHOLD_RANGE = (-5.0, 5.0)  # a reader's ``liked`` threshold (``subscribers library threshold``)
DEFAULT_THRESHOLD = 0.1
# Files of the zone folder that ``ZoneInfo`` opens but that are no zone a reader picks.
_NOT_ZONES = frozenset({"Factory", "localtime", "posixrules", ""})
_STATUSES = frozenset(status.value for status in SubscriberStatus)
SHOWN_CHARACTERS = 40  # of a bad value, in a fault: enough to recognise it, never a page of it


@dataclass(frozen=True, slots=True)
class StoredSettings:
    """A reader's settings as read: safe to use, and the first fault, if any."""

    status: SubscriberStatus
    timezone: str
    send_hour: int
    cadence: str
    backfill: str
    taste_threshold: float
    fault: str | None


@functools.lru_cache(maxsize=4096)
def zone_exists(name: str) -> bool:
    """Whether *name* is a time zone this machine's zone database has."""
    if name in _NOT_ZONES or len(name) > 100 or name.startswith(("/", ".")) or ".." in name or "\x00" in name:
        return False
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def stored_status(raw: object) -> SubscriberStatus:
    """A stored status; one digestbot never writes reads as ``paused`` (held)."""
    return SubscriberStatus(raw) if raw in _STATUSES else SubscriberStatus.PAUSED


def stored_zone(raw: object) -> str:
    """A stored zone; one this machine does not know reads as UTC."""
    return raw if isinstance(raw, str) and zone_exists(raw) else "UTC"


def stored_hour(raw: object) -> int:
    """A stored send hour; one that is not 0 to 23 reads as 0."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= 23 else 0


def _shown(raw: object) -> str:
    if not isinstance(raw, str):
        return repr(raw)[:SHOWN_CHARACTERS]
    text = "".join(c if c.isprintable() else "?" for c in raw[:SHOWN_CHARACTERS])
    return repr(text) + ("…" if len(raw) > SHOWN_CHARACTERS else "")


def stored_threshold(raw: object) -> float:
    """A stored ``liked`` threshold; one that is not a number in ``THRESHOLD_RANGE`` reads as the default."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return DEFAULT_THRESHOLD
    low, high = THRESHOLD_RANGE
    return float(raw) if low <= raw <= high else DEFAULT_THRESHOLD  # NaN compares false: the default


def read_settings(
    *,
    status: object,
    timezone: object,
    send_hour: object,
    cadence: object,
    backfill: object,
    taste_threshold: object = DEFAULT_THRESHOLD,
) -> StoredSettings:
    """*status* … *backfill* as a store row holds them, read as ``StoredSettings``."""
    faults: list[str] = []
    read_status = stored_status(status)
    if read_status.value != status:
        faults.append(f"status {_shown(status)} is not one digestbot writes (read as paused)")
    zone = stored_zone(timezone)
    if zone != timezone:
        faults.append(f"time zone {_shown(timezone)} is not one this machine knows")
    hour = stored_hour(send_hour)
    if hour != send_hour:
        faults.append(f"send hour {_shown(send_hour)} is not 0 to 23")
    read_cadence = cadence if isinstance(cadence, str) and cadence in CADENCES else "daily"
    if read_cadence != cadence:
        faults.append(f"cadence {_shown(cadence)} is not one digestbot writes")
    read_backfill = backfill if isinstance(backfill, str) and _BACKFILL.fullmatch(backfill) else "0d"
    if read_backfill != backfill:
        faults.append(f"backfill {_shown(backfill)} is not one digestbot writes")
    threshold = stored_threshold(taste_threshold)
    if threshold != taste_threshold:
        faults.append(f"taste threshold {_shown(taste_threshold)} is not a number from -5 to 5")
    fault = "; ".join(faults) or None
    return StoredSettings(read_status, zone, hour, read_cadence, read_backfill, threshold, fault)
