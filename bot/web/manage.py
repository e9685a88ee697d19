"""Subscriber endpoint: the manage page, ``GET|POST /m/{token}``.

The reader changes their tags or filter, cadence, zone and hour, their yes/no
settings, pauses, resumes or subscribes again, connects their Zotero library
(``bot.web.zotero_pages``), and sees their next digest; a
``multipart/form-data`` POST adds to their library (``bot.web.uploads``).  Every
POST comes through the manage door (``bot.web.doors``: its origin and form token).  A thin shell
over ``bot.subscribers``: never writes SQL itself, never logs tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from bot.config import site_url
from bot.domain import Subscriber, SubscriberFields
from bot.domain.routes import MANAGE
from bot.domain.statuses import StatusAction, reader_action
from bot.subscribers.fields import StatusChangeRefused, SubscriberInputError
from bot.subscribers.settings import by_action
from bot.subscribers.subscriptions import change_status, edit, filter_warning, set_filter, set_setting
from bot.taste.library_service import taste_summary
from bot.web.choices import read_choices
from bot.web.doors import MANAGE_DOOR, posted, through
from bot.web.forms import address_of, is_multipart
from bot.web.manage_view import PageNotice, language_choices, manage_choices, toggles
from bot.web.next_digest_view import Outlooks
from bot.web.site import Site, with_reader
from bot.web.uploads import LibraryUploads
from bot.web.zotero_pages import ACTIONS as ZOTERO_ACTIONS
from bot.web.zotero_pages import ZoteroForms

log = logging.getLogger(__name__)

BUSY = PageNotice(503, error="Busy: please try again in a moment.")


def _first(lists: dict[str, list[str]], name: str) -> str:
    return (lists.get(name) or [""])[0]


class ManagePage:
    def __init__(self, site: Site) -> None:
        self.site = site
        self.rules = site.loaded.rules
        self.outlooks = Outlooks(site.read_only, self.rules, send_empty=site.settings.digest.send_empty)
        self.uploads = LibraryUploads(site)
        self.zotero = ZoteroForms(site)

    def routes(self) -> list[Route]:
        return [Route(MANAGE.pattern, self.manage, methods=["GET", "POST"])]

    async def page(
        self,
        request: Request,
        subscriber: Subscriber,
        told: PageNotice | None = None,
        values: dict[str, list[str]] | None = None,
    ) -> HTMLResponse:
        """The page as *subscriber* sees it now, saying *told*; *values* (a form that
        failed) fill the form instead of what is stored."""
        told = told or PageNotice()
        site = self.site
        return site.pages.render(
            "manage",
            told.status_code,
            token=request.path_params["token"],
            subscriber=subscriber,
            told=told,
            form=manage_choices(subscriber, await site.tag_menu.tags(), values),
            next_digest=await self.outlooks.next_digest(subscriber, site.now()),
            taste=await run_in_threadpool(taste_summary, site.read_only, subscriber),
            toggles=toggles(subscriber),
            languages=language_choices(subscriber, site.settings.llm),
            zotero=await self.zotero.shown(subscriber),
        )

    @with_reader
    @through(MANAGE_DOOR)
    async def manage(self, request: Request, subscriber: Subscriber) -> Response:
        site = self.site
        if request.method in ("GET", "HEAD"):
            return await self.page(request, subscriber)
        if is_multipart(request.headers.get("content-type", "")):
            # The library upload: every form of the page posts to the page's own address,
            # so the page a POST answers with is at the address its relative links expect.
            told = await self.uploads.upload(request, subscriber)
            return told if isinstance(told, Response) else await self.page(request, subscriber, told)
        lists = posted(request)
        if not await run_in_threadpool(site.by_token.settle, subscriber):
            return await self.page(request, subscriber, BUSY)
        return await self.act(request, subscriber, lists)

    async def act(self, request: Request, subscriber: Subscriber, lists: dict[str, list[str]]) -> Response:
        """What the manage form's ``action`` asks for (the token and origin are checked)."""
        action = (lists.get("action") or [""])[0]
        form = self.forms().get(action)
        if form is not None:
            return await form(request, subscriber, lists)
        toggled = by_action(action)
        if toggled is not None:
            setting, on = toggled
            site = self.site
            subscriber = await run_in_threadpool(
                set_setting, site.factory, subscriber.email, setting.name, on, site.now()
            )
            return await self.page(
                request, subscriber, PageNotice(message=setting.turned_on if on else setting.turned_off)
            )
        change = reader_action(action, subscriber.status)
        after = await self.set_status(request, subscriber, change) if change is not None else None
        if change is None or after is None:
            return await self.page(request, subscriber, PageNotice(400, error="That change is not possible now."))
        self.outlooks.forget(after.id)
        if action == "resubscribe":
            log.info("subscriber %d subscribed again through their manage page", after.id)
        return await self.page(request, after, PageNotice(message=change.said))

    def forms(self) -> dict[str, Callable[[Request, Subscriber, dict[str, list[str]]], Awaitable[Response]]]:
        """The page's forms by their ``action``, but the settings and status buttons."""
        first = _first
        return {
            "settings": self.change_settings,
            "filter": lambda request, subscriber, lists: self.change_filter(
                request, subscriber, first(lists, "filter")
            ),
            "language": lambda request, reader, lists: self.change_language(request, reader, first(lists, "language")),
            "threshold": self.change_threshold,
            **dict.fromkeys(ZOTERO_ACTIONS, self.change_zotero),
        }

    async def change_threshold(self, request: Request, subscriber: Subscriber, lists: dict[str, list[str]]) -> Response:
        changed, told = await self.uploads.threshold(subscriber, _first(lists, "threshold"))
        return await self.page(request, changed, told)

    async def change_zotero(self, request: Request, subscriber: Subscriber, lists: dict[str, list[str]]) -> Response:
        told = await self.zotero.act(_first(lists, "action"), subscriber, lists)
        return await self.page(request, subscriber, told)

    async def set_status(self, request: Request, subscriber: Subscriber, change: StatusAction) -> Subscriber | None:
        """*change* applied, if their status (read again as it is changed) still allows it;
        an unsubscribe or resubscribe goes in the consent record with the page (never
        its token) and the client's address."""
        site = self.site
        page = f"{site_url(site.settings.web)}{MANAGE.prefix} (their manage page)"
        try:
            changed = await run_in_threadpool(
                partial(change_status, page=page, client=address_of(request), only_from=change.before),
                site.factory,
                subscriber.email,
                change.after,
                site.now(),
            )
        except StatusChangeRefused:
            return None
        site.by_token.settled(subscriber)
        return changed

    async def change_settings(self, request: Request, subscriber: Subscriber, values: dict[str, list[str]]) -> Response:
        """Tags or filter, cadence, time zone and send hour at once: all valid, or nothing changes."""
        site = self.site
        try:
            fields = read_choices(values, email=subscriber.email)
            subscriber = await run_in_threadpool(edit, site.factory, site.settings, fields, site.now())
        except SubscriberInputError as exc:
            return await self.page(request, subscriber, PageNotice(400, error=str(exc)), values)
        return await self.saved(request, subscriber, "Saved.")

    async def change_filter(self, request: Request, subscriber: Subscriber, raw: str) -> Response:
        site = self.site
        try:
            subscriber = await run_in_threadpool(set_filter, site.factory, site.settings, subscriber, raw, site.now())
        except SubscriberInputError as exc:
            return await self.page(request, subscriber, PageNotice(400, error=str(exc)), {"filter": [raw]})
        return await self.saved(request, subscriber, "Filter saved.")

    async def change_language(self, request: Request, subscriber: Subscriber, raw: str) -> Response:
        """The language of the reader's TL;DRs, one of those offered."""
        site = self.site
        fields = SubscriberFields(email=subscriber.email)
        try:
            subscriber = await run_in_threadpool(
                partial(edit, language=raw), site.factory, site.settings, fields, site.now()
            )
        except SubscriberInputError as exc:
            return await self.page(request, subscriber, PageNotice(400, error=str(exc)))
        return await self.page(
            request, subscriber, PageNotice(message="Saved: your next digests' TL;DRs are in that language.")
        )

    async def saved(self, request: Request, subscriber: Subscriber, said: str) -> HTMLResponse:
        """The page after new digest choices, warning of a filter that matches nothing."""
        self.outlooks.forget(subscriber.id)
        warning = await run_in_threadpool(filter_warning, self.site.read_only, self.rules, subscriber.filter)
        return await self.page(request, subscriber, PageNotice(message=said, warning=warning))
