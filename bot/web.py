"""Subscriber endpoint: the pages behind the links in every digest (Starlette, served by uvicorn).

``POST /u/{token}`` unsubscribes (RFC 8058 one-click: mail providers POST
``List-Unsubscribe=One-Click``; the confirm button posts the same), ``GET
/u/{token}`` only shows a page with that button (link scanners and
prefetchers GET every URL in a message), ``GET|POST /m/{token}`` lets the
subscriber pause, resume or change their filter.  Tokens are HMAC-signed and
bound to one subscriber; an unknown, forged or altered token gets the same
404.  A thin shell over ``bot.subscriptions``: never sends mail, never renders
digests, never writes SQL itself, never logs tokens or keys.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from email import policy
from email.parser import BytesParser
from pathlib import Path
from types import FrameType
from urllib.parse import parse_qs, urlsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from bot.config import Settings
from bot.domain import Subscriber, SubscriberStatus
from bot.subscriptions import SubscriberInputError, by_token, change_status, set_filter
from bot.tokens import signing_key

log = logging.getLogger(__name__)

MAX_FORM_BYTES = 4096
# Pages carry the token in their URL: never leak it in a Referer, never cache it,
# never frame it, run no script at all.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


def create_app(
    settings: Settings, factory: sessionmaker[Session], *, clock: Callable[[], datetime] | None = None
) -> Starlette:
    key = signing_key(settings)
    now = clock or (lambda: datetime.now(UTC))
    pages = Environment(
        loader=FileSystemLoader(str(Path(settings.paths.templates_dir) / "web")),
        autoescape=select_autoescape(enabled_extensions=("html.j2",)),
        undefined=StrictUndefined,
    )
    page = pages.get_template("page.html.j2")

    def render(view: str, status_code: int = 200, *, token: str = "", **context: object) -> HTMLResponse:
        html = page.render(
            view=view,
            list_name=settings.sender.from_name,
            token=token,
            form_token=form_token(key, token) if token else "",
            **context,
        )
        return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)

    def not_found() -> HTMLResponse:
        return render("not_found", 404)

    async def form_of(request: Request) -> dict[str, str] | None:
        """The form's fields (first value each), or None when the body is too big."""
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return None
        return parse_form(request.headers.get("content-type", ""), body)

    # The store calls are blocking: they run in Starlette's thread pool, not on the event loop.
    async def subscriber_of(request: Request) -> Subscriber | None:
        return await run_in_threadpool(by_token, factory, key, request.path_params["token"])

    async def set_status(subscriber: Subscriber, status: SubscriberStatus) -> Subscriber:
        return await run_in_threadpool(change_status, factory, subscriber.email, status, now())

    async def unsubscribe(request: Request) -> Response:
        subscriber = await subscriber_of(request)
        if subscriber is None:
            return not_found()
        if request.method in ("GET", "HEAD"):
            done = subscriber.status is SubscriberStatus.UNSUBSCRIBED
            return render("confirm", token=request.path_params["token"], subscriber=subscriber, done=done)
        form = await form_of(request)
        if form is None:
            return PlainTextResponse("request body too large", 413, headers=SECURITY_HEADERS)
        # RFC 8058 asks for exactly this field; our own button posts it too.
        if form.get("List-Unsubscribe") != "One-Click":
            return render("confirm", 400, token=request.path_params["token"], subscriber=subscriber, done=False)
        if subscriber.status is not SubscriberStatus.UNSUBSCRIBED:
            subscriber = await set_status(subscriber, SubscriberStatus.UNSUBSCRIBED)
            log.info("subscriber %d unsubscribed through their link", subscriber.id)
        return render("confirm", token=request.path_params["token"], subscriber=subscriber, done=True)

    def manage_page(
        request: Request,
        subscriber: Subscriber,
        status_code: int = 200,
        *,
        message: str | None = None,
        error: str | None = None,
        filter_text: str | None = None,
    ) -> HTMLResponse:
        return render(
            "manage",
            status_code,
            token=request.path_params["token"],
            subscriber=subscriber,
            message=message,
            error=error,
            filter_text=subscriber.filter if filter_text is None else filter_text,
        )

    async def manage(request: Request) -> Response:
        subscriber = await subscriber_of(request)
        if subscriber is None:
            return not_found()
        if request.method in ("GET", "HEAD"):
            return manage_page(request, subscriber)
        if not same_origin(request, settings.web.public_url):
            return render("forbidden", 403)
        form = await form_of(request)
        if form is None:
            return PlainTextResponse("request body too large", 413, headers=SECURITY_HEADERS)
        if not hmac.compare_digest(form.get("form", ""), form_token(key, request.path_params["token"])):
            return render("forbidden", 403)
        action = form.get("action", "")
        if action == "pause" and subscriber.status is SubscriberStatus.ACTIVE:
            subscriber = await set_status(subscriber, SubscriberStatus.PAUSED)
            return manage_page(request, subscriber, message="Paused: no digests until you resume.")
        if action == "resume" and subscriber.status is SubscriberStatus.PAUSED:
            subscriber = await set_status(subscriber, SubscriberStatus.ACTIVE)
            return manage_page(request, subscriber, message="Resumed: your next digest comes as usual.")
        if action == "resubscribe" and subscriber.status is SubscriberStatus.UNSUBSCRIBED:
            subscriber = await set_status(subscriber, SubscriberStatus.ACTIVE)
            log.info("subscriber %d subscribed again through their manage page", subscriber.id)
            return manage_page(request, subscriber, message="Subscribed again: your next digest comes as usual.")
        if action == "filter":
            raw = form.get("filter", "")
            try:
                subscriber = await run_in_threadpool(set_filter, factory, settings, subscriber, raw, now())
            except SubscriberInputError as exc:
                return manage_page(request, subscriber, 400, error=str(exc), filter_text=raw)
            return manage_page(request, subscriber, message="Filter saved.")
        return manage_page(request, subscriber, 400, error="That change is not possible now.")

    async def health(_request: Request) -> Response:
        return PlainTextResponse("ok")

    async def anything_else(_request: Request, _exc: Exception) -> Response:
        return not_found()  # unknown paths and methods look like unknown tokens

    async def server_error(_request: Request, exc: Exception) -> Response:
        log.error("request failed: %s", type(exc).__name__)  # no traceback: it could hold the token
        return render("error", 500)

    app = Starlette(
        routes=[
            Route("/u/{token}", unsubscribe, methods=["GET", "POST"]),
            Route("/m/{token}", manage, methods=["GET", "POST"]),
            Route("/healthz", health, methods=["GET"]),
        ],
        exception_handlers={404: anything_else, 405: anything_else, Exception: server_error},
    )
    # "/u/TOKEN/" must not answer with a redirect built from the Host header: every
    # path that is not exactly ours gets the same 404.
    app.router.redirect_slashes = False
    return app


def form_token(key: bytes, token: str) -> str:
    """What the manage page's forms carry: a page from elsewhere cannot know it."""
    return hmac.new(key, b"manage-form\0" + token.encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:32]


def same_origin(request: Request, public_url: str) -> bool:
    """Whether a browser says this POST comes from our own page.  A request with
    neither header (curl, old browsers) passes here; the form token still guards it."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    ours = {f"{request.url.scheme}://{request.url.netloc}"}
    if public_url:
        parts = urlsplit(public_url)
        ours.add(f"{parts.scheme}://{parts.netloc}")
    return origin in ours


def parse_form(content_type: str, body: bytes) -> dict[str, str]:
    """Fields of an ``application/x-www-form-urlencoded``, ``multipart/form-data``
    (RFC 8058 allows it for one-click) or ``text/plain`` body: first value each."""
    if content_type.split(";", 1)[0].strip().lower() == "multipart/form-data":
        message = BytesParser(policy=policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n" + body
        )
        fields: dict[str, str] = {}
        if message.is_multipart():
            for part in list(message.iter_parts())[:20]:
                name = part.get_param("name", header="content-disposition")
                if isinstance(name, str) and name not in fields:
                    payload = part.get_payload(decode=True)
                    fields[name] = payload.decode("utf-8", "replace").strip() if isinstance(payload, bytes) else ""
        return fields
    try:
        parsed = parse_qs(body.decode("utf-8", "replace").strip(), keep_blank_values=True, max_num_fields=20)
    except ValueError:  # more fields than any of our forms has: treated as an empty form
        return {}
    return {name: values[0] for name, values in parsed.items()}


def serve(settings: Settings, factory: sessionmaker[Session], *, host: str, port: int) -> None:
    """Run the endpoint with uvicorn until SIGINT/SIGTERM (the ``digestbot serve`` command)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            # uvicorn re-raises the signal after its graceful shutdown (exit status 143);
            # a clean stop exits 0 here, as the scheduler and worker do.
            getattr(self, "_captured_signals", []).clear()

    # access_log off: request lines carry the token of whoever clicked.
    config = uvicorn.Config(
        create_app(settings, factory),
        host=host,
        port=port,
        access_log=False,
        proxy_headers=True,
        server_header=False,
        log_level="info",
    )
    Server(config).run()
