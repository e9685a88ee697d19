"""Subscriber endpoint: the reader a link token names, as every page under a token sees them.

A token is looked up in groups (``bot.web.lookups``); one that names nobody spends
the client's miss budget (``bot.web.limits``, raising ``TooManyMisses`` once it is
spent); a reader whose one-click unsubscribe is journaled but not yet applied
(``bot.web.unsubscribe_journaling``) is shown unsubscribed.  ``bot.web.site.with_reader`` wraps a page's
handler with this.  Never renders and never decides what a reader may change (the
page modules and ``bot.subscribers`` do).
"""

from __future__ import annotations

import time
from dataclasses import replace

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from bot.domain import Subscriber, SubscriberStatus
from bot.domain.routes import UNSUBSCRIBE
from bot.domain.statuses import after_unsubscribe
from bot.unsubscribes import Journal
from bot.web.limits import MissBudget, client_key
from bot.web.lookups import TokenLookups
from bot.web.unsubscribe_journaling import Acknowledger


class TokenSubscribers:
    """TokenSubscribers by the token in a request's path, with the unsubscribes this process acknowledged."""

    def __init__(self, lookups: TokenLookups, misses: MissBudget, acks: Acknowledger) -> None:
        self.lookups, self.misses, self.acks = lookups, misses, acks
        self.journal: Journal = acks.journal

    def start(self) -> None:
        self.acks.start()
        self.lookups.start()

    async def stop(self) -> None:
        await self.lookups.stop()
        await self.acks.stop()

    def miss(self, request: Request) -> None:
        """Spend the client's budget for a token that named nobody (raises ``TooManyMisses``)."""
        self.misses.miss(client_key(request.client.host if request.client else ""), time.monotonic())

    async def of(self, request: Request) -> Subscriber | None:
        """The subscriber of the request's ``token``, shown unsubscribed once an
        unsubscribe is acknowledged; None (and a miss spent) when it names nobody.  A
        valid token is answered whatever the client sent before."""
        found = await self.lookups.subscriber(request.path_params["token"])
        if found is None:
            self.miss(request)
            return None
        after = after_unsubscribe(found.status)
        if after is None:
            return found
        # A one-click POST is journaled whatever the journal holds already (applying
        # twice is harmless): it skips the journal look-up that pages need.
        one_click = request.method == "POST" and request.url.path.startswith(UNSUBSCRIBE.prefix)
        if found.id in self.acks.acknowledged or (
            not one_click and bool(await run_in_threadpool(self.journal.pending_subscribers, [found.id]))
        ):
            return replace(found, status=after)
        return found

    def settled(self, subscriber: Subscriber) -> None:
        """The store now says what this process acknowledged for *subscriber*."""
        self.acks.acknowledged.discard(subscriber.id)

    def settle(self, subscriber: Subscriber) -> bool:
        """Apply a pending unsubscribe of *subscriber* before their page changes anything
        (a later apply must not undo what they do there); False while the store is busy.
        Blocking: run it in a thread."""
        if subscriber.status is not SubscriberStatus.UNSUBSCRIBED or not self.journal.pending_subscribers(
            [subscriber.id]
        ):
            return True
        return self.journal.try_apply_pending(self.acks.factory)
