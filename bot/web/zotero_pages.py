"""Subscriber endpoint: a reader's Zotero library.  On the manage page (its forms come
through the manage door): connect a library with an API key (checked once with Zotero,
sealed before it is stored, never shown back), choose the collections that count and
the one saved papers go into, disconnect.  ``GET /d/TOKEN/DATE/N/zotero``, the "Save to
Zotero" link beside each entry, shows the entry and one button (a link scanner's GET
saves nothing); its ``POST`` is journaled as an unsubscribe is and answered at once, and
the daemon writes the item.  A thin shell over ``bot.zotero``: never writes SQL itself,
never logs a key or a token.
"""

from __future__ import annotations

import logging
from functools import cached_property

from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.config import ConfigError
from bot.domain import Subscriber, SubscriberStatus
from bot.domain.routes import ZOTERO_SAVE
from bot.domain.zotero_states import SaveState
from bot.sealed import Sealer, sealer_of
from bot.store.zotero import save_of
from bot.unsubscribes import journal_of
from bot.web.doors import RATING_DOOR, behind, through
from bot.web.feedback import rated, sent_entry
from bot.web.manage_view import PageNotice
from bot.web.site import Site, with_reader
from bot.web.versions import WebVersions
from bot.zotero.api import ZoteroApi
from bot.zotero.connection import ConnectError, ZoteroShown, choose_collections, connect, disconnect, shown

log = logging.getLogger(__name__)

ACTIONS = ("zotero_connect", "zotero_collections", "zotero_disconnect")
# A page waits at most this long for Zotero to say whose a key is.
CHECK_SECONDS = 10.0
SAVED = "Saved to your Zotero library."
WILL_BE_SAVED = "Will be saved to your Zotero library within a minute."
NOT_ANSWERING = "Will be saved: Zotero is not answering now. digestbot keeps trying; nothing is lost."
CANNOT_SAVE = "Saving needs a Zotero library connected with a key that may write: connect one on your manage page."


class ZoteroForms:
    """The manage page's Zotero forms (``ManagePage.act`` hands them their actions)."""

    def __init__(self, site: Site) -> None:
        self.site = site

    @cached_property
    def sealer(self) -> Sealer:
        return sealer_of(self.site.settings)

    async def shown(self, subscriber: Subscriber) -> ZoteroShown | None:
        return await run_in_threadpool(shown, self.site.read_only, subscriber.id)

    async def act(self, action: str, subscriber: Subscriber, lists: dict[str, list[str]]) -> PageNotice:
        site = self.site
        if action == "zotero_disconnect":
            had = await run_in_threadpool(disconnect, site.factory, subscriber.id)
            return PageNotice(message="Disconnected: your Zotero key is forgotten." if had else None)
        if action == "zotero_collections":
            into = (lists.get("save_into") or [""])[0] or None
            await run_in_threadpool(choose_collections, site.factory, subscriber.id, lists.get("collection", []), into)
            return PageNotice(message="Saved: your library is synced again with those collections within a minute.")
        key = (lists.get("zotero_key") or [""])[0]
        library = (lists.get("zotero_library") or ["user"])[0]
        try:
            connected = await run_in_threadpool(self._connect, subscriber.id, library, key)
        except ConnectError as error:
            return PageNotice(400, error=f"Not connected: {error}.")
        except ConfigError as error:
            log.error("zotero: %s", error)
            return PageNotice(503, error="Not connected: this site cannot keep a key now; try again later.")
        return PageNotice(
            message=f"Connected to {connected.library}: digestbot can {connected.can}. "
            "Its papers join your library here within a minute."
        )

    def _connect(self, subscriber_id: int, library: str, key: str) -> ZoteroShown:
        site = self.site
        config = site.settings.zotero
        bounded = config.model_copy(update={"answer_seconds": min(config.answer_seconds, CHECK_SECONDS), "attempts": 1})
        with ZoteroApi(bounded) as api:
            return connect(site.factory, api, self.sealer, subscriber_id, library, key, site.now())


class ZoteroSavePage:
    """``/d/TOKEN/DATE/N/zotero``: the entry, and the button that saves it."""

    def __init__(self, site: Site, versions: WebVersions) -> None:
        self.site, self.versions = site, versions

    def routes(self) -> list[Route]:
        return [Route(ZOTERO_SAVE.pattern, self.save, methods=["GET", "POST"])]

    @with_reader
    @behind(RATING_DOOR)
    async def save(self, request: Request, subscriber: Subscriber) -> Response:
        params = request.path_params
        asked = rated(params["day"], params["ref"], "more")
        found = await run_in_threadpool(sent_entry, self.versions, subscriber, asked) if asked is not None else None
        if asked is None or found is None:
            return self.site.pages.not_found()
        entry_id, title, _ = found
        if request.method in ("GET", "HEAD"):
            said = await run_in_threadpool(self._said, subscriber, entry_id)
            return self._page(request, subscriber, title, asked, said=said)
        return await self.record(request, subscriber, asked, entry_id, title)

    @through(RATING_DOOR)
    async def record(
        self, request: Request, subscriber: Subscriber, asked: object, entry_id: int, title: str
    ) -> Response:
        site = self.site
        connection = await run_in_threadpool(shown, site.read_only, subscriber.id)
        if subscriber.status is SubscriberStatus.UNSUBSCRIBED or connection is None or not connection.saves:
            return self._page(request, subscriber, title, asked, status=409, said=CANNOT_SAVE)
        journal = journal_of(site.factory)
        try:
            await run_in_threadpool(journal.append_saves, [(subscriber.id, entry_id)], site.now())
        except SQLAlchemyError as error:  # the journal cannot be written: nothing was taken
            log.warning("zotero: a save not journaled (%s)", type(error).__name__)
            return site.pages.render("busy", 503)
        said = await run_in_threadpool(self._said, subscriber, entry_id, True)
        return self._page(request, subscriber, title, asked, said=said, done=True)

    def _page(
        self,
        request: Request,
        subscriber: Subscriber,
        title: str,
        asked: object,
        *,
        status: int = 200,
        said: str | None = None,
        done: bool = False,
    ) -> Response:
        return self.site.pages.render(
            "zotero_save",
            status,
            token=request.path_params["token"],
            title=title,
            asked=asked,
            said=said,
            done=done,
            can_save=said not in (CANNOT_SAVE, SAVED),
        )

    def _said(self, subscriber: Subscriber, entry_id: int, asked_now: bool = False) -> str | None:
        """What the page says of the entry's save: made, on its way, waiting for Zotero,
        or (None) never asked."""
        with self.site.read_only() as session:
            save = save_of(session, subscriber.id, entry_id)
        connection = shown(self.site.read_only, subscriber.id)
        if connection is None or not connection.saves:
            return CANNOT_SAVE
        if save is not None and save.state == SaveState.SAVED:
            return SAVED
        if save is not None and save.state == SaveState.FAILED:
            return "Zotero did not take it within two days; press the button to ask again."
        waiting = save is not None and save.problem is not None
        if waiting or (asked_now and connection.problem):
            return NOT_ANSWERING
        if save is not None or asked_now or entry_id in journal_of(self.site.factory).saves_asked(subscriber.id):
            return WILL_BE_SAVED
        return None
