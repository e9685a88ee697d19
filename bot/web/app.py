"""Subscriber endpoint: the app (Starlette, served by uvicorn), made of its pages.

Each page module owns its routes and its template (``templates/web/NAME.html.j2``):
``unsubscribe`` (``/u/{token}``), ``manage`` (``/m/{token}``), ``versions`` (``/d/{token}/{date}``,
the web version of a sent digest and its BibTeX), ``feedback`` (``/d/{token}/{date}/{n}/more``
or ``less``), ``zotero_pages`` (``/d/{token}/{date}/{n}/zotero``, saving an entry to the
reader's Zotero library), ``feeds`` (``/f/{token}.atom``), ``signup`` (``/subscribe`` and ``/c/{token}``)
and ``operations`` (``/healthz``, ``/metrics``).  Tokens are HMAC-signed and bound to one
subscriber; an unknown, forged or altered token gets the same 404 as an unknown path
(``bot.web.site.with_reader``).  Only puts the pages together: never answers a request
itself, never writes SQL, never logs tokens or keys.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from bot.config import Settings, site_url
from bot.mail.parts import Parts
from bot.web.feedback import FeedbackPages
from bot.web.feeds import FeedPage
from bot.web.manage import ManagePage
from bot.web.operations import OperatorPages
from bot.web.signup import SignupPages
from bot.web.site import Site, open_site
from bot.web.unsubscribe import UnsubscribePage
from bot.web.versions import WebVersionPages, WebVersions
from bot.web.zotero_pages import ZoteroSavePage

log = logging.getLogger(__name__)


def create_app(
    settings: Settings,
    factory: sessionmaker[Session],
    *,
    clock: Callable[[], datetime] | None = None,
    loaded: Parts | None = None,
) -> Starlette:
    """The app on *settings* and what the process *loaded* of their files (built here,
    every part at once, when not given: a broken file stops the start)."""
    loaded = (loaded or Parts(settings)).check()
    site = open_site(loaded, factory, clock or (lambda: datetime.now(UTC)))
    if settings.web.signup and not settings.web.public_url:
        log.warning("web.signup is on without web.public_url: confirmation links point at %s", site_url(settings.web))

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        site.by_token.start()
        try:
            yield
        finally:
            await site.by_token.stop()

    app = Starlette(lifespan=lifespan, routes=routes(site), exception_handlers=site.pages.error_handlers())
    # "/u/TOKEN/" must not answer with a redirect built from the Host header: every
    # path that is not exactly ours gets the same 404.
    app.router.redirect_slashes = False
    return app


def routes(site: Site) -> list[BaseRoute]:
    """Every page's routes (no two match the same path)."""
    versions = WebVersions(site.loaded, site.read_only)
    pages = (
        UnsubscribePage(site),
        ManagePage(site),
        SignupPages(site),
        WebVersionPages(site, versions),
        ZoteroSavePage(site, versions),  # before FeedbackPages: its paths fit the rating route's pattern too
        FeedbackPages(site, versions),
        FeedPage(site),
        OperatorPages(site),
    )
    return [route for page in pages for route in page.routes()]
