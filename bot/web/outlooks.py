"""Subscriber endpoint: the manage page's "what is waiting, or why nothing is" line.

Reading a week of entries costs more than the rest of the page, and anyone holding a
link may reload it: each subscriber's line is worked out at most once a minute (or again
after they change their filter).  Never writes; never decides what a digest holds
(``bot.choose.quiet`` does).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from bot.choose.quiet import outlook, outlook_note
from bot.choose.tagging import TagRules
from bot.domain import Subscriber, SubscriberStatus

FRESH_SECONDS = 60.0
REMEMBERED = 10_000


class Outlooks:
    def __init__(self, reader: sessionmaker[Session], rules: TagRules) -> None:
        self.reader, self.rules = reader, rules
        self._lines: OrderedDict[int, tuple[float, str]] = OrderedDict()

    def forget(self, subscriber_id: int) -> None:
        self._lines.pop(subscriber_id, None)

    async def line(self, subscriber: Subscriber, now: datetime) -> str | None:
        """The line for *subscriber*'s page; None once they have unsubscribed."""
        if subscriber.status is SubscriberStatus.UNSUBSCRIBED:
            return None
        known = self._lines.get(subscriber.id)
        if known is not None and time.monotonic() - known[0] < FRESH_SECONDS:
            return known[1]
        line = await run_in_threadpool(self._read, subscriber, now)
        if subscriber.status is SubscriberStatus.PAUSED:
            line = "Paused: nothing is sent until you resume. " + line
        self._lines[subscriber.id] = (time.monotonic(), line)
        self._lines.move_to_end(subscriber.id)
        while len(self._lines) > REMEMBERED:
            self._lines.popitem(last=False)
        return line

    def _read(self, subscriber: Subscriber, now: datetime) -> str:
        with self.reader() as session:
            return outlook_note(outlook(session, subscriber, self.rules, as_of=now))
