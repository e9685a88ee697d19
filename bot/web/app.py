"""Subscriber endpoint: the pages behind the links in every digest (Starlette, served by uvicorn).

``POST /u/{token}`` unsubscribes (RFC 8058 one-click: mail providers POST
``List-Unsubscribe=One-Click``; the confirm button posts the same), ``GET
/u/{token}`` only shows a page with that button (link scanners and
prefetchers GET every URL in a message), ``GET|POST /m/{token}`` lets the
subscriber change their tags or filter, cadence, zone and hour, pause,
resume or leave, and shows their next digest (a ``multipart/form-data`` POST there adds
to their library, ``bot.web.uploads``), ``GET /d/{token}/{date}`` is
the web version of a sent digest and its BibTeX, ``GET|POST /d/{token}/{date}/{n}/more``
(or ``less``) rates an entry of it (``bot.web.feedback``); ``/subscribe`` and
``/c/{token}`` (sign-up) are ``bot.web.signup``'s.  Tokens are HMAC-signed
and bound to one subscriber; an unknown, forged or altered token gets the
same 404.  A thin shell over ``bot.subscribers.subscriptions`` and ``bot.web.versions``:
never sends digests, never writes SQL itself, never logs tokens or keys.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from bot.config import Settings, site_url
from bot.domain import Subscriber, SubscriberStatus
from bot.metrics import Metrics
from bot.store.errors import is_busy
from bot.subscribers.settings import by_action
from bot.subscribers.statuses import reader_action
from bot.subscribers.subscriptions import (
    SubscriberInputError,
    change_status,
    edit,
    filter_warning,
    set_filter,
    set_setting,
)
from bot.taste.service import taste_summary
from bot.tokens import signing_key
from bot.unsubscribes import journal_of, reader_of
from bot.web.acks import Acknowledger
from bot.web.choices import read_choices
from bot.web.feedback import FeedbackPages
from bot.web.feeds import PersonalFeeds
from bot.web.forms import (
    MAX_CHOICES_FIELDS,
    MAX_CHOICES_FORM_BYTES,
    SECURITY_HEADERS,
    BodyStalled,
    form_of,
    form_token,
    form_token_ok,
    is_multipart,
    same_origin,
)
from bot.web.limits import MissBudget, TooManyMisses, client_key
from bot.web.lookups import TokenLookups
from bot.web.manage import manage_context
from bot.web.outlooks import Outlooks, rules_or_none
from bot.web.signup import SignupPages, TagMenu, address_of
from bot.web.uploads import LibraryUploads
from bot.web.versions import WebVersions, wanted

log = logging.getLogger(__name__)


def create_app(
    settings: Settings, factory: sessionmaker[Session], *, clock: Callable[[], datetime] | None = None
) -> Starlette:
    endpoint = _Endpoint(settings, factory, clock or (lambda: datetime.now(UTC)))
    if settings.web.signup and not settings.web.public_url:
        log.warning("web.signup is on without web.public_url: confirmation links point at %s", site_url(settings.web))

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        endpoint.acks.start()
        endpoint.lookups.start()
        try:
            yield
        finally:
            await endpoint.lookups.stop()
            await endpoint.acks.stop()

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/u/{token}", endpoint.unsubscribe, methods=["GET", "POST"]),
            Route("/m/{token}", endpoint.manage, methods=["GET", "POST"]),
            Route("/c/{token}", endpoint.signups.confirmation, methods=["GET", "POST"]),
            *(
                [Route("/subscribe", endpoint.signups.subscribe, methods=["GET", "POST"])]
                if settings.web.signup
                else []
            ),
            Route("/d/{token}/{day}", endpoint.web_version, methods=["GET"]),
            Route("/f/{token}.atom", endpoint.feed, methods=["GET"]),
            Route("/d/{token}/{day}/{ref}", endpoint.web_version, methods=["GET"]),
            Route("/d/{token}/{day}/{ref}/{verdict}", endpoint.rate, methods=["GET", "POST"]),
            Route("/healthz", endpoint.health, methods=["GET"]),
            Route("/metrics", endpoint.metrics_page, methods=["GET"]),
        ],
        exception_handlers={
            404: endpoint.anything_else,
            405: endpoint.anything_else,
            TooManyMisses: endpoint.too_many,
            ClientDisconnect: endpoint.client_gone,
            BodyStalled: endpoint.client_gone,
            OperationalError: endpoint.store_error,
            Exception: endpoint.server_error,
        },
    )
    # "/u/TOKEN/" must not answer with a redirect built from the Host header: every
    # path that is not exactly ours gets the same 404.
    app.router.redirect_slashes = False
    return app


UNSUBSCRIBED_FEED = "You unsubscribed: this feed ends here. Your manage page can subscribe you again.\n"


class _Endpoint:
    """The request handlers, sharing the settings, the store and the page template."""

    def __init__(self, settings: Settings, factory: sessionmaker[Session], now: Callable[[], datetime]) -> None:
        self.settings, self.factory, self.now = settings, factory, now
        self.key = signing_key(settings)
        self.journal = journal_of(factory)
        # Look-ups read without the store's write lock (SQLite), so a long delivery or
        # ingest never holds a page or an unsubscribe back.
        self.reader = reader_of(factory)
        self.lookups = TokenLookups(self.reader, self.key)
        self.rules = rules_or_none(settings.paths.tags_file)
        self.outlooks = Outlooks(self.reader, self.rules, send_empty=settings.digest.send_empty)
        self.tag_menu = TagMenu(self.reader)
        self.versions = WebVersions(settings, self.reader)
        self.feeds = PersonalFeeds(settings, self.reader)
        self.acks = Acknowledger(self.journal, factory, now)
        self.misses = MissBudget(settings.web.misses_per_second, settings.web.misses_burst)
        self.metrics = Metrics(self.reader, now)
        self.metrics_readers = [ipaddress.ip_network(n, strict=False) for n in settings.metrics.allow_from]
        pages = Environment(
            loader=FileSystemLoader(str(Path(settings.paths.templates_dir) / "web")),
            autoescape=select_autoescape(enabled_extensions=("html.j2",)),
            undefined=StrictUndefined,
        )
        self.page = pages.get_template("page.html.j2")
        self.signups = SignupPages(settings, factory, self.key, self.tag_menu, self.render, now, self.misses)
        self.feedback = FeedbackPages(settings, factory, self.versions, self.key, self.render, now)
        self.uploads = LibraryUploads(settings, factory, self.key, self.manage_page, self.forbidden, now)

    def render(
        self,
        view: str,
        status_code: int = 200,
        *,
        token: str = "",
        headers: dict[str, str] | None = None,
        background: BackgroundTask | None = None,
        more: dict[str, object] | None = None,
        **context: object,
    ) -> HTMLResponse:
        """The page template's *view*; *more* adds to *context* (values built elsewhere)."""
        context.update(more or {})
        html = self.page.render(
            view=view,
            list_name=self.settings.sender.from_name,
            token=token,
            form_token=form_token(self.key, token) if token else "",
            signup=self.settings.web.signup,
            **context,
        )
        return HTMLResponse(
            html, status_code=status_code, headers={**SECURITY_HEADERS, **(headers or {})}, background=background
        )

    def not_found(self) -> HTMLResponse:
        return self.render("not_found", 404)

    def forbidden(self) -> HTMLResponse:
        return self.render("forbidden", 403)

    # The store calls are blocking: they run in Starlette's thread pool, not on the event loop.
    async def subscriber_of(self, request: Request) -> Subscriber | None:
        """The token's subscriber, shown unsubscribed once an unsubscribe is acknowledged;
        raises ``TooManyMisses`` when this token names nobody and the client sent too
        many such (a valid token is answered whatever the client sent before)."""
        found = await self.lookups.subscriber(request.path_params["token"])
        if found is None:
            self.misses.miss(client_key(request.client.host if request.client else ""), time.monotonic())
            return None
        if found.status is SubscriberStatus.UNSUBSCRIBED:
            return found
        # A one-click POST is journaled whatever the journal holds already (applying
        # twice is harmless): it skips the journal look-up that pages need.
        one_click = request.method == "POST" and request.url.path.startswith("/u/")
        if found.id in self.acks.acknowledged or (
            not one_click and bool(await run_in_threadpool(self.journal.pending_subscribers, [found.id]))
        ):
            return replace(found, status=SubscriberStatus.UNSUBSCRIBED)
        return found

    async def set_status(self, request: Request, subscriber: Subscriber, status: SubscriberStatus) -> Subscriber:
        """The manage page's status change; an unsubscribe or resubscribe goes in the
        consent record with the page (never its token) and the client's address."""
        page = f"{site_url(self.settings.web)}/m/ (their manage page)"
        changed = await run_in_threadpool(
            partial(change_status, page=page, client=address_of(request)),
            self.factory,
            subscriber.email,
            status,
            self.now(),
        )
        self.acks.acknowledged.discard(subscriber.id)  # settled: the store says it now
        return changed

    async def unsubscribe(self, request: Request) -> Response:
        subscriber = await self.subscriber_of(request)
        if subscriber is None:
            return self.not_found()
        token = request.path_params["token"]
        if request.method in ("GET", "HEAD"):
            done = subscriber.status is SubscriberStatus.UNSUBSCRIBED
            return self.render("confirm", token=token, subscriber=subscriber, done=done)
        lists = await form_of(request)
        if lists is None:
            return PlainTextResponse("request body too large", 413, headers=SECURITY_HEADERS)
        form = {name: values[0] for name, values in lists.items()}
        # RFC 8058 asks for exactly this field; our own button posts it too.
        if form.get("List-Unsubscribe") != "One-Click":
            return self.render("confirm", 400, token=token, subscriber=subscriber, done=False)
        if subscriber.status is not SubscriberStatus.UNSUBSCRIBED:
            # Answered once durable in the journal; applied to the store in the background.
            await self.acks.acknowledge(subscriber.id)
            subscriber = replace(subscriber, status=SubscriberStatus.UNSUBSCRIBED)
        return self.render("confirm", token=token, subscriber=subscriber, done=True)

    async def manage_page(
        self,
        request: Request,
        subscriber: Subscriber,
        status_code: int = 200,
        *,
        message: str | None = None,
        error: str | None = None,
        warning: str | None = None,
        values: dict[str, list[str]] | None = None,
    ) -> HTMLResponse:
        context = manage_context(
            subscriber,
            await self.tag_menu.tags(),
            values=values,
            next_digest=await self.outlooks.next_digest(subscriber, self.now()),
            taste=await run_in_threadpool(taste_summary, self.reader, subscriber),
        )
        return self.render(
            "manage",
            status_code,
            token=request.path_params["token"],
            subscriber=subscriber,
            message=message,
            error=error,
            warning=warning,
            more=context,
        )

    async def manage(self, request: Request) -> Response:
        subscriber = await self.subscriber_of(request)
        if subscriber is None:
            return self.not_found()
        if request.method in ("GET", "HEAD"):
            return await self.manage_page(request, subscriber)
        if not same_origin(request, self.settings.web.public_url):
            return self.render("forbidden", 403)
        if is_multipart(request.headers.get("content-type", "")):
            # The library upload: every form of the page posts to the page's own address,
            # so the page a POST answers with is at the address its relative links expect.
            return await self.uploads.upload(request, subscriber)
        lists = await form_of(request, MAX_CHOICES_FORM_BYTES, MAX_CHOICES_FIELDS)
        if lists is None:
            return PlainTextResponse("request body too large", 413, headers=SECURITY_HEADERS)
        form = {name: values[0] for name, values in lists.items()}
        if not form_token_ok(self.key, request.path_params["token"], form.get("form", "")):
            return self.render("forbidden", 403)
        if not await run_in_threadpool(self._settle, subscriber):
            return await self.manage_page(request, subscriber, 503, error="Busy: please try again in a moment.")
        return await self.act(request, subscriber, lists)

    async def act(self, request: Request, subscriber: Subscriber, lists: dict[str, list[str]]) -> Response:
        """What the manage form's ``action`` asks for (the token and origin are checked)."""
        form = {name: values[0] for name, values in lists.items()}
        action = form.get("action", "")
        if action == "settings":
            return await self.change_settings(request, subscriber, lists)
        if action == "filter":
            return await self.change_filter(request, subscriber, form.get("filter", ""))
        if action == "threshold":
            return await self.uploads.threshold(request, subscriber, form.get("threshold", ""))
        toggled = by_action(action)
        if toggled is not None:
            setting, on = toggled
            subscriber = await run_in_threadpool(
                set_setting, self.factory, subscriber.email, setting.name, on, self.now()
            )
            return await self.manage_page(request, subscriber, message=setting.turned_on if on else setting.turned_off)
        change = reader_action(action, subscriber.status)
        if change is None:
            return await self.manage_page(request, subscriber, 400, error="That change is not possible now.")
        subscriber = await self.set_status(request, subscriber, change.after)
        self.outlooks.forget(subscriber.id)
        if action == "resubscribe":
            log.info("subscriber %d subscribed again through their manage page", subscriber.id)
        return await self.manage_page(request, subscriber, message=change.said)

    async def change_settings(self, request: Request, subscriber: Subscriber, values: dict[str, list[str]]) -> Response:
        """Tags or filter, cadence, time zone and send hour at once: all valid, or nothing changes."""
        try:
            fields = read_choices(values, email=subscriber.email)
            subscriber = await run_in_threadpool(edit, self.factory, self.settings, fields, self.now())
        except SubscriberInputError as exc:
            return await self.manage_page(request, subscriber, 400, error=str(exc), values=values)
        self.outlooks.forget(subscriber.id)
        warning = await run_in_threadpool(filter_warning, self.reader, self.rules, subscriber.filter)
        return await self.manage_page(request, subscriber, message="Saved.", warning=warning)

    def _settle(self, subscriber: Subscriber) -> bool:
        """Apply a pending unsubscribe of *subscriber* before their page changes anything
        (a later apply must not undo what they do here); False while the store is busy."""
        if subscriber.status is not SubscriberStatus.UNSUBSCRIBED or not self.journal.pending_subscribers(
            [subscriber.id]
        ):
            return True
        return self.journal.try_apply_pending(self.factory)

    async def change_filter(self, request: Request, subscriber: Subscriber, raw: str) -> Response:
        try:
            subscriber = await run_in_threadpool(set_filter, self.factory, self.settings, subscriber, raw, self.now())
        except SubscriberInputError as exc:
            return await self.manage_page(request, subscriber, 400, error=str(exc), values={"filter": [raw]})
        self.outlooks.forget(subscriber.id)
        warning = await run_in_threadpool(filter_warning, self.reader, self.rules, subscriber.filter)
        return await self.manage_page(request, subscriber, message="Filter saved.", warning=warning)

    async def web_version(self, request: Request) -> Response:
        """A sent digest with every summary whole, or its BibTeX (``bot.web.versions``)."""
        subscriber = await self.subscriber_of(request)
        asked = wanted(request.path_params["day"], request.path_params.get("ref"))
        if subscriber is None or asked is None:
            return self.not_found()
        content = await run_in_threadpool(self.versions.content, subscriber, asked.day)
        if content is None:
            if await run_in_threadpool(self.versions.removed, asked.day):
                keep_days = self.settings.database.keep_days
                return self.render("not_kept", 404, keep_days=keep_days, day=asked.day.isoformat())
            return self.not_found()
        if not asked.bibtex:
            token = request.path_params["token"]
            verdicts = await run_in_threadpool(self.versions.verdicts, subscriber, content)
            page = await run_in_threadpool(self.versions.page, content, token, form_token(self.key, token), verdicts)
            return HTMLResponse(page, headers=SECURITY_HEADERS)
        text = self.versions.bibtex(content, asked.ref)
        if text is None:
            return self.not_found()
        name = f"digest-{asked.day.isoformat()}" + (f"-{asked.ref}" if asked.ref else "")
        download = {"Content-Disposition": f'attachment; filename="{name}.bib"'}
        return Response(
            text, media_type="application/x-bibtex; charset=utf-8", headers={**SECURITY_HEADERS, **download}
        )

    async def feed(self, request: Request) -> Response:
        """The reader's Atom feed (``bot.web.feeds``), behind the token of their other pages."""
        subscriber = await self.subscriber_of(request)
        if subscriber is None:
            return self.not_found()
        if subscriber.status is SubscriberStatus.UNSUBSCRIBED:
            # Gone on purpose: feed programs stop polling a 410, and what they were sent
            # stays out of anyone's reach who has the address.  Subscribing again from
            # the manage page brings the feed back.
            return PlainTextResponse(UNSUBSCRIBED_FEED, 410, headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})
        digests = await run_in_threadpool(self.feeds.recent, subscriber, self.now())
        validators = self.feeds.validators(digests)
        headers = {**SECURITY_HEADERS, **validators.headers(), "Cache-Control": "private, max-age=300"}
        if validators.unchanged_for(request.headers.get("if-none-match"), request.headers.get("if-modified-since")):
            return Response(status_code=304, headers=headers)
        body = await run_in_threadpool(self.feeds.atom, subscriber, request.path_params["token"], digests)
        return Response(body, media_type="application/atom+xml; charset=utf-8", headers=headers)

    async def rate(self, request: Request) -> Response:
        """ "More like this" / "less like this" on an entry of a sent digest (``bot.web.feedback``)."""
        subscriber = await self.subscriber_of(request)
        if subscriber is None:
            return self.not_found()
        return await self.feedback.rate(request, subscriber)

    async def metrics_page(self, request: Request) -> Response:
        """The queue as Prometheus reads it, for the networks in metrics.allow_from only;
        anyone else gets the answer an unknown path gets."""
        client = request.client.host if request.client else ""
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return self.not_found()
        if not any(address in network for network in self.metrics_readers):
            return self.not_found()
        body = await run_in_threadpool(self.metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def health(self, _request: Request) -> Response:
        return PlainTextResponse("ok")

    async def anything_else(self, _request: Request, _exc: Exception) -> Response:
        return self.not_found()  # unknown paths and methods look like unknown tokens

    async def too_many(self, _request: Request, _exc: Exception) -> Response:
        return PlainTextResponse("too many requests", 429, headers={**SECURITY_HEADERS, "Retry-After": "10"})

    async def client_gone(self, _request: Request, exc: Exception) -> Response:
        # The client left mid-body or stopped sending it: nothing was read, nothing changes,
        # and a flood of such requests must not flood the log.
        log.debug("request body not received: %s", type(exc).__name__)
        return PlainTextResponse("request body not received", 408, headers={**SECURITY_HEADERS, "Connection": "close"})

    async def store_error(self, _request: Request, exc: Exception) -> Response:
        if not is_busy(exc):  # only a lock held past the busy timeout is "try again"
            raise exc
        log.warning("request not answered: the store stayed locked past its busy timeout")
        return self.render("busy", 503, headers={"Retry-After": "5"})

    async def server_error(self, _request: Request, exc: Exception) -> Response:
        log.error("request failed: %s", type(exc).__name__)  # no traceback: it could hold the token
        return self.render("error", 500)
