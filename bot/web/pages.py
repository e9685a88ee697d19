"""Subscriber endpoint: rendering a page, and the answers every page shares.

Each page has a template of its own in ``templates/web/`` (``NAME.html.j2``,
extending ``base.html.j2``); ``Pages.render`` gives it the list's name, the
reader's token and the form token that goes with it, and answers with the
security headers.  The error answers (not found, forbidden, busy, a failure) are
the same whichever page asked.  Never reads the store and never decides what a
request may do (the page modules do).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from sqlalchemy.exc import OperationalError
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from bot.config import Settings
from bot.domain.routes import BY_NAME, base_path
from bot.store.store_errors import is_busy
from bot.web.forms import SECURITY_HEADERS, BodyStalled, form_token
from bot.web.limits import TooManyMisses

log = logging.getLogger(__name__)

ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


class Pages:
    """The page templates, with what every page shows (the list's name, the sign-up link)."""

    def __init__(self, settings: Settings, key: bytes) -> None:
        self.key = key
        self.templates = Environment(
            loader=FileSystemLoader(str(Path(settings.paths.templates_dir) / "web")),
            autoescape=select_autoescape(enabled_extensions=("html.j2",)),
            undefined=StrictUndefined,
        )
        self.templates.globals.update(
            list_name=settings.sender.from_name, signup=settings.web.signup, link=page_link(settings.web.public_url)
        )

    def render(
        self,
        page: str,
        status_code: int = 200,
        *,
        token: str = "",
        headers: dict[str, str] | None = None,
        background: BackgroundTask | None = None,
        **context: object,
    ) -> HTMLResponse:
        """The template ``templates/web/PAGE.html.j2`` with *context*; *token* (a reader's) also gives
        the page the form token its forms post."""
        html = self.templates.get_template(f"{page}.html.j2").render(
            token=token, form_token=form_token(self.key, token) if token else "", **context
        )
        return HTMLResponse(
            html, status_code=status_code, headers={**SECURITY_HEADERS, **(headers or {})}, background=background
        )

    def not_found(self) -> HTMLResponse:
        return self.render("not_found", 404)

    def forbidden(self, refused: str = "") -> HTMLResponse:
        """A POST that did not come from our own page (*refused*: ``signup`` or
        ``confirm`` for those pages' words; a reader's page otherwise)."""
        return self.render("forbidden", 403, refused=refused)

    def error_handlers(self) -> dict[type[Exception] | int, ErrorHandler]:
        """What Starlette answers when no page did: unknown paths and methods look like
        unknown tokens, and no failure shows its traceback (it could hold a token)."""

        async def anything_else(_request: Request, _exc: Exception) -> Response:
            return self.not_found()

        async def too_many(_request: Request, _exc: Exception) -> Response:
            return PlainTextResponse("too many requests", 429, headers={**SECURITY_HEADERS, "Retry-After": "10"})

        async def client_gone(_request: Request, exc: Exception) -> Response:
            # The client left mid-body or stopped sending it: nothing was read, nothing
            # changes, and a flood of such requests must not flood the log.
            log.debug("request body not received: %s", type(exc).__name__)
            headers = {**SECURITY_HEADERS, "Connection": "close"}
            return PlainTextResponse("request body not received", 408, headers=headers)

        async def store_error(_request: Request, exc: Exception) -> Response:
            if not is_busy(exc):  # only a lock held past the busy timeout is "try again"
                raise exc
            log.warning("request not answered: the store stayed locked past its busy timeout")
            return self.render("busy", 503, headers={"Retry-After": "5"})

        async def server_error(_request: Request, exc: Exception) -> Response:
            log.error("request failed: %s", type(exc).__name__)
            return self.render("error", 500)

        return {
            404: anything_else,
            405: anything_else,
            TooManyMisses: too_many,
            ClientDisconnect: client_gone,
            BodyStalled: client_gone,
            OperationalError: store_error,
            Exception: server_error,
        }


def too_large() -> Response:
    """The answer to a form body over its limit."""
    return PlainTextResponse("request body too large", 413, headers=SECURITY_HEADERS)


def page_link(public_url: str) -> Callable[..., str]:
    """The ``link(name, **fields)`` a page's template builds its links with: the named
    route's path under the endpoint's own (``routes.base_path``), so that a link works
    whatever host the page was reached by, behind a proxy's path too."""
    base = base_path(public_url)

    def link(name: str, **values: object) -> str:
        return base + BY_NAME[name].path(**values)

    return link
