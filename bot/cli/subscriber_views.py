"""CLI views of subscribers: a subscriber's JSON object, a table of several, who vouches
for an operator's add, and each consent event's JSON object and line for a person.
Prints nothing itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.cli.output import JsonObject, jsonable, out
from bot.cli.tables import Column, fitted
from bot.domain import ConsentEvent, Subscriber
from bot.subscribers.settings import SETTINGS

if TYPE_CHECKING:
    from rich.table import Table


def consent_json(event: ConsentEvent) -> JsonObject:
    return {
        "event": event.event,
        "at": jsonable(event.at),
        "address": event.address,
        "page": event.page,
        "client": event.client,
        "detail": event.detail,
    }


def consent_line(event: ConsentEvent) -> str:
    """One consent event for a person, its address first (an operator's add must not read
    as if the address were the operator): "2026-11-24 10:00 UTC ada@x confirmed from
    192.0.2.1 at https://..."."""
    verb = {
        "signup": "signed up",
        "confirm": "confirmed",
        "operator": "added by an operator",
        "unsubscribe": "unsubscribed",
        "resubscribe": "subscribed again",
    }.get(event.event, event.event)
    parts = [f"{event.at:%Y-%m-%d %H:%M} UTC", event.address, verb]
    if event.client:
        parts.append(f"from {event.client}")
    if event.page:
        parts.append(f"at {event.page}")
    if event.detail:
        parts.append(f"({event.detail})")
    return " ".join(parts)


def subscriber_json(s: Subscriber) -> JsonObject:
    from bot.subscribers.subscriptions import held_because

    return {
        "email": s.email,
        "name": s.name,
        "filter": s.filter,
        "timezone": s.timezone,
        "send_hour": s.send_hour,
        "status": s.status,
        "backfill": s.backfill,
        "cadence": s.cadence,
        **{setting.name: getattr(s, setting.name) for setting in SETTINGS},
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        **({"held": f"{fault}; never planned until 'subscribers edit' mends it"} if (fault := held_because(s)) else {}),
    }


def subscriber_table(subscribers: list[Subscriber], title: str) -> Table:
    columns = [
        Column("email", whole=True),
        Column("name", drop=2),
        Column("filter", wants=20, words=True),
        # "08:00 Europe/Berlin": an hour means nothing without its zone; the zone folds
        # onto a line of its own rather than take the filter's room.
        Column("sends at", least=19),
        Column("cadence", whole=True, drop=1),
        Column("status", whole=True),
    ]
    rows = [
        [s.email, s.name, s.filter, f"{s.send_hour:02d}:00 {s.timezone}", s.cadence, _status(s)] for s in subscribers
    ]
    return fitted(columns, rows, width=out.width, title=title)


def _status(subscriber: Subscriber) -> str:
    """Its status, and "held" when a stored setting keeps it out of planning (``show`` says
    which, a filter that does not parse included: ``list`` reads no filter)."""
    return f"{subscriber.status.value}, held" if subscriber.fault else subscriber.status.value


def operator_note(command: str) -> str:
    """Who vouches for an operator's add, for the consent record."""
    return f"{command}, {operator_user()}"


def operator_user() -> str:
    """The operator who ran this command, for the consent record."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or passwd
        user = "unknown user"
    return f"by {user}"
