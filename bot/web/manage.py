"""Subscriber endpoint: what the manage page shows (``GET|POST /m/{token}``).

The digest choices as the form shows them (ticked tags or the advanced filter,
cadence, time zone, send hour), filled from the subscriber or, after an error,
from what they sent.  Pure: ``app`` reads the store and decides what a POST does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from bot.choose.filters import shown_filter
from bot.domain import Subscriber
from bot.subscribers.settings import SETTINGS
from bot.web.choices import cadences, menu, ticked_tags, zone_groups, zones
from bot.web.outlooks import NextDigest

if TYPE_CHECKING:
    from bot.taste.service import TasteSummary


def manage_context(
    subscriber: Subscriber,
    tags: list[tuple[str, int]],
    *,
    values: Mapping[str, list[str]] | None = None,
    next_digest: NextDigest | None = None,
    taste: TasteSummary | None = None,
) -> dict[str, object]:
    """The template's values for *subscriber*'s page; *values* (a submitted form that
    failed) win over the stored ones, so the person sees what they sent."""
    if values is not None:
        ticked = list(values.get("tag", []))
        advanced = (values.get("filter") or [""])[0]
        cadence = (values.get("cadence") or [subscriber.cadence])[0]
        timezone = (values.get("timezone") or [subscriber.timezone])[0]
        hour = (values.get("send_hour") or [str(subscriber.send_hour)])[0]
    else:
        found = ticked_tags(subscriber.filter)
        ticked, advanced = (found, "") if found is not None else ([], shown_filter(subscriber.filter))
        cadence, timezone, hour = subscriber.cadence, subscriber.timezone, str(subscriber.send_hour)
    return {
        "tags": menu(tags, ticked),
        "filter_text": advanced,
        "cadence": cadence,
        "cadences": cadences(),
        "timezone": timezone,
        "zone_groups": zone_groups(),
        "zone_extra": [] if timezone in zones() else [timezone],  # a zone no longer offered, as stored
        "send_hour": int(hour) if hour.isascii() and hour.isdigit() and int(hour) < 24 else subscriber.send_hour,
        "next_digest": next_digest,
        "taste": taste,
        # Each yes/no setting's button: the action it posts and its words.
        "toggles": [
            (f"{s.flag}_off", s.turn_off) if getattr(subscriber, s.name) else (f"{s.flag}_on", s.turn_on)
            for s in SETTINGS
        ],
    }
