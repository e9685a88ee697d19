"""CLI views of a digest, for ``history`` and ``subscribers show``: the story of its day,
its JSON object and a table of several.  Prints nothing itself."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from bot.cli.output import JsonObject
from bot.cli.tables import Column, fitted

if TYPE_CHECKING:
    from rich.table import Table

    from bot.store.digests import DigestRow


def digest_story(d: DigestRow, close_hour: int, at: datetime) -> str:
    """What happened to a digest's day, in a few words (``bot.plan.days.day_story``),
    each time in the subscriber's zone and saying which."""
    from bot.domain import DigestKind
    from bot.plan.days import DayFacts, closes_at, day_story

    mailed = d.attempts > 0  # a digest of the feed cadence is sent once planned, never tried
    facts = DayFacts(d.local_date, d.state, d.planned_at, d.sent_at, d.nothing_at, d.arrived, mailed)
    if d.kind is not DigestKind.SCHEDULED:
        facts = DayFacts(d.local_date, d.state, d.planned_at, d.sent_at, None, None, mailed)
    tz = d.subscriber_timezone
    closes = closes_at(d.local_date, send_hour=d.subscriber_send_hour, close_hour=close_hour, timezone=tz)
    return day_story(facts, timezone=tz, closes_at=closes, now=at, zone=True)


def digest_json(d: DigestRow, story: str = "") -> JsonObject:
    return {
        "id": d.id,
        "subscriber": d.subscriber_email,
        "local_date": d.local_date,
        "kind": d.kind,
        "state": d.state,
        "entries": d.entry_count,
        "attempts": d.attempts,
        "smtp_code": d.smtp_code,
        "error": d.last_error,
        "message_id": d.message_id,
        "planned_at": d.planned_at,
        "sent_at": d.sent_at,
        "resend_of": d.resend_of,
        "nothing_at": d.nothing_at,
        "story": story,
    }


def digest_table(
    digests: list[DigestRow], title: str, stories: list[str], *, width: int, subscriber: bool = True
) -> Table:
    """Digests as ``history`` lists them; without *subscriber*, one reader's (their
    address is the title's)."""
    columns = [
        Column("id", whole=True, justify="right"),
        *([Column("subscriber", whole=True)] if subscriber else []),
        Column("day", whole=True),
        Column("kind", drop=2),
        Column("state", whole=True),
        Column("entries", whole=True, drop=1, justify="right"),
        Column("tries", whole=True, drop=3, justify="right"),
        Column("what happened", wants=17, words=True),  # "sent at 13:00 BST" on one line; a file name whole
        Column("error"),  # left out first when no digest has one (``tables``), never when one does
    ]
    rows = [
        [
            str(d.id),
            *([d.subscriber_email] if subscriber else []),
            d.local_date.isoformat(),
            f"resend of #{d.resend_of}" if d.resend_of else d.kind.value,
            d.state.value,
            str(d.entry_count),
            str(d.attempts),
            story,
            d.last_error or "",
        ]
        for d, story in zip(digests, stories, strict=True)
    ]
    return fitted(columns, rows, width=width, title=title)
