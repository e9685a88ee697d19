"""CLI views of a subscriber's consent record, for ``subscribers show``: each event's
JSON object and its line for a person.  Prints nothing itself."""

from __future__ import annotations

from typing import Any

from bot.cli.shell import jsonable


def consent_json(event: Any) -> dict[str, Any]:
    return {
        "event": event.event,
        "at": jsonable(event.at),
        "address": event.address,
        "page": event.page,
        "client": event.client,
        "detail": event.detail,
    }


def consent_line(event: Any) -> str:
    """One consent event for a person: "2026-11-24 10:00 UTC confirmed ada@x from 192.0.2.1 at https://..."."""
    verb = {
        "signup": "signed up",
        "confirm": "confirmed",
        "operator": "added by an operator",
        "unsubscribe": "unsubscribed",
        "resubscribe": "subscribed again",
    }.get(event.event, event.event)
    parts = [f"{event.at:%Y-%m-%d %H:%M} UTC", verb, event.address]
    if event.client:
        parts.append(f"from {event.client}")
    if event.page:
        parts.append(f"at {event.page}")
    if event.detail:
        parts.append(f"({event.detail})")
    return " ".join(parts)
