"""Subscriber endpoint: the unsubscribe page, ``/u/{token}``.

``POST`` unsubscribes (RFC 8058 one-click: mail providers POST
``List-Unsubscribe=One-Click``; the page's button posts the same); ``GET`` only
shows a page with that button, because link scanners and prefetchers GET every
URL in a message.  The answer waits for the unsubscribe to be durable in the
journal (``bot.web.unsubscribe_journaling``), which applies it to the store in the background.
Never writes the store itself and never logs tokens.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.domain import Subscriber, SubscriberStatus
from bot.domain.routes import UNSUBSCRIBE
from bot.domain.statuses import after_unsubscribe
from bot.web.doors import ONE_CLICK_DOOR, posted, through
from bot.web.site import Site, with_reader
from bot.web.unsubscribe_journaling import NotJournaled


class UnsubscribePage:
    def __init__(self, site: Site) -> None:
        self.site = site

    def routes(self) -> list[Route]:
        return [Route(UNSUBSCRIBE.pattern, self.unsubscribe, methods=["GET", "POST"])]

    @with_reader
    @through(ONE_CLICK_DOOR)
    async def unsubscribe(self, request: Request, subscriber: Subscriber) -> Response:
        render, token = self.site.pages.render, request.path_params["token"]
        if request.method in ("GET", "HEAD"):
            done = subscriber.status is SubscriberStatus.UNSUBSCRIBED
            return render("unsubscribe", token=token, subscriber=subscriber, done=done)
        lists = posted(request)
        # RFC 8058 asks for exactly this field; our own button posts it too.
        if (lists.get("List-Unsubscribe") or [""])[0] != "One-Click":
            return render("unsubscribe", 400, token=token, subscriber=subscriber, done=False)
        if (after := after_unsubscribe(subscriber.status)) is not None:
            # Answered once durable in the journal; applied to the store in the background.
            try:
                await self.site.by_token.acks.acknowledge(subscriber.id)
            except NotJournaled:
                # Nothing is acknowledged that is not journaled; the mail provider or the person tries again.
                retry = {"Retry-After": "60"}
                return render(
                    "unsubscribe", 503, token=token, headers=retry, subscriber=subscriber, done=False, try_again=True
                )
            subscriber = replace(subscriber, status=after)
        return render("unsubscribe", token=token, subscriber=subscriber, done=True)
