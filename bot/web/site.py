"""Subscriber endpoint: what every page shares, and the one way a page gets its reader.

``Site`` holds the settings, the store (a writer and a read-only one that never waits for
the write lock), the signing key, the clock, the page templates (``bot.web.pages``),
the readers by token (``bot.web.token_subscribers``) and the tag menu.  A page module is a class
made from a ``Site`` that lists its own routes; a handler under a token is wrapped
by ``with_reader``, which looks the token up, spends the client's miss budget and
answers 404 for a token that names nobody, and hands the handler the reader.
Never renders and never decides what a request may do.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Protocol, TypeVar

from sqlalchemy.orm import Session, sessionmaker
from starlette.requests import Request
from starlette.responses import Response

from bot.config import Settings
from bot.domain import Subscriber
from bot.mail.parts import Parts
from bot.unsubscribes import journal_of, read_only_sessions
from bot.web.limits import MissBudget
from bot.web.lookups import TokenLookups
from bot.web.pages import Pages
from bot.web.tag_menu import TagMenu
from bot.web.token_subscribers import TokenSubscribers
from bot.web.unsubscribe_journaling import Acknowledger


@dataclass(frozen=True, slots=True)
class Site:
    settings: Settings
    loaded: Parts  # the tag rules, the signing key: loaded once for the process
    factory: sessionmaker[Session]
    # Look-ups read without the store's write lock (SQLite), so a long delivery or
    # ingest never holds a page or an unsubscribe back.
    read_only: sessionmaker[Session]
    key: bytes
    now: Callable[[], datetime]
    pages: Pages
    by_token: TokenSubscribers
    tag_menu: TagMenu


def open_site(loaded: Parts, factory: sessionmaker[Session], now: Callable[[], datetime]) -> Site:
    settings, key = loaded.settings, loaded.key
    read_only = read_only_sessions(factory)
    web = settings.web
    by_token = TokenSubscribers(
        TokenLookups(read_only, key),
        MissBudget(web.misses_per_second, web.misses_burst),
        Acknowledger(journal_of(factory), factory, now, also=partial(_take_saves, factory, now, settings)),
    )
    return Site(settings, loaded, factory, read_only, key, now, Pages(settings, key), by_token, TagMenu(read_only))


def _take_saves(factory: sessionmaker[Session], now: Callable[[], datetime], settings: Settings) -> None:
    """The "Save to Zotero" asks journaled, taken into the store: a saved paper is a
    "more like this" and a library paper at once, before Zotero has it."""
    from bot.zotero.saves import take_asks

    take_asks(journal_of(factory), factory, now(), settings.digest.search_url)


class HasSite(Protocol):
    site: Site


PageT = TypeVar("PageT", bound=HasSite)
ReaderHandler = Callable[[PageT, Request, Subscriber], Awaitable[Response]]


def with_reader(handler: ReaderHandler[PageT]) -> Callable[[PageT, Request], Awaitable[Response]]:
    """The request handler that answers *handler* with the reader of the path's token,
    and 404 (the same for an unknown, forged or altered token) when it names nobody."""

    @functools.wraps(handler)
    async def answered(page: PageT, request: Request) -> Response:
        subscriber = await page.site.by_token.of(request)
        if subscriber is None:
            return page.site.pages.not_found()
        return await handler(page, request, subscriber)

    return answered
