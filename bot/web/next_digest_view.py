"""Subscriber endpoint: the manage page's "your next digest" part: when it goes out,
what it would hold so far, or why nothing is waiting.

Reading a week of entries costs more than the rest of the page, and anyone holding a
link may reload it: each subscriber's preview is worked out at most once a minute (or
again after they change something).  Never writes; never decides what a digest holds
(``bot.plan.next_digest`` does).
"""

from __future__ import annotations

import logging
import time
import zoneinfo
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from bot.choose.tagging import TagRules
from bot.domain import Subscriber, SubscriberStatus
from bot.mail.why import reader_why
from bot.plan.cadence import mails
from bot.plan.days import local_time
from bot.plan.next_digest import next_day, outlook, outlook_note

FRESH_SECONDS = 60.0
REMEMBERED = 10_000
SHOWN = 5  # the page lists this many of what is waiting; the note gives the count

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NextDigest:
    note: str  # what is waiting, or why nothing is
    when: str  # "Monday 30 November, 08:00 (Europe/Berlin)"; "" when nothing is sent
    first: tuple[tuple[str, str], ...]  # (title, why, in the reader's words) of what it would hold so far
    goes: str = "Goes out"  # "Goes into your feed" for the feed cadence: no mail


class Outlooks:
    def __init__(self, read_only: sessionmaker[Session], rules: TagRules, *, send_empty: bool = False) -> None:
        self.read_only, self.rules, self.send_empty = read_only, rules, send_empty
        self._known: OrderedDict[int, tuple[float, NextDigest]] = OrderedDict()

    def forget(self, subscriber_id: int) -> None:
        self._known.pop(subscriber_id, None)

    async def next_digest(self, subscriber: Subscriber, now: datetime) -> NextDigest | None:
        """The preview for *subscriber*'s page; None unless they are active or paused."""
        if not subscriber.status.subscribed:
            return None
        known = self._known.get(subscriber.id)
        if known is not None and time.monotonic() - known[0] < FRESH_SECONDS:
            return known[1]
        found = await run_in_threadpool(self._read, subscriber, now)
        self._known[subscriber.id] = (time.monotonic(), found)
        self._known.move_to_end(subscriber.id)
        while len(self._known) > REMEMBERED:
            self._known.popitem(last=False)
        return found

    def _read(self, subscriber: Subscriber, now: datetime) -> NextDigest:
        with self.read_only() as session:
            seen = outlook(session, subscriber, self.rules, as_of=now, first=SHOWN)
            day = next_day(session, subscriber, now)
        seen = replace(seen, first=tuple((title, reader_why(why)) for title, why in seen.first))
        note = outlook_note(seen, mailed=mails(subscriber.cadence))
        if subscriber.status is SubscriberStatus.PAUSED:
            return NextDigest("Paused: nothing is sent until you resume. " + note, "", seen.first)
        if not seen.matching and not self.send_empty:
            return NextDigest(note, "", seen.first)  # no digest is due, so no time to give
        send_at = local_time(day, subscriber.send_hour, subscriber.timezone)
        local = send_at.astimezone(zoneinfo.ZoneInfo(subscriber.timezone))
        when = f"{local:%A %d %B}, {local:%H:%M} ({subscriber.timezone})"
        if send_at <= now:
            when = f"now: its send time, {local:%H:%M} ({subscriber.timezone}), has passed today"
        return NextDigest(note, when, seen.first, "Goes out" if mails(subscriber.cadence) else "Goes into your feed")
