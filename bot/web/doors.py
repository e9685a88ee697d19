"""Subscriber endpoint: the one door every form POST comes through.

A page's POST handler is decorated with ``through(door)``: before the handler runs, the
door checks that the POST comes from one of our own pages (``same_origin``, from its
headers, before any of the body is read), reads the form within the door's size (413
past it) and checks the form's token; the handler then finds the form in
``request.state.form``.  A GET or HEAD goes straight to the handler.  The doors are
named here, one a kind of form, and a test walks every POST route of the app and knocks
on each with a cross-origin, a token-less and an oversize POST.

Never touches the store; never decides what a form does.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Protocol, cast

from starlette.requests import Request
from starlette.responses import Response

from bot.web.forms import (
    MAX_CHOICES_FIELDS,
    MAX_CHOICES_FORM_BYTES,
    MAX_FORM_BYTES,
    csrf_ok,
    form_of,
    form_token_ok,
    is_multipart,
    same_origin,
)
from bot.web.pages import too_large
from bot.web.site import Site

P = ParamSpec("P")
Form = Mapping[str, list[str]]
CSRF_COOKIE = "digestbot_signup"  # the sign-up form's double-submit cookie


class Page(Protocol):
    site: Site


# Whether a form carries the token its page was given: (signing key, request, form).
TokenCheck = Callable[[bytes, Request, Form], bool]


def _first(form: Form, name: str) -> str:
    return (form.get(name) or [""])[0]


def page_token(key: bytes, request: Request, form: Form) -> bool:
    """A reader's page (manage, rating): its ``form`` field made from the link's token."""
    return form_token_ok(key, request.path_params["token"], _first(form, "form"))


def confirmation_token(key: bytes, request: Request, form: Form) -> bool:
    """The confirmation page: its ``form`` field made from the confirmation link's token."""
    return form_token_ok(key, "confirm:" + request.path_params["token"], _first(form, "form"))


def signup_pair(key: bytes, request: Request, form: Form) -> bool:
    """The sign-up form: its ``csrf`` field and the cookie that went with it (double submit)."""
    return csrf_ok(key, _first(form, "csrf"), request.cookies.get(CSRF_COOKIE, ""), time.time())


@dataclass(frozen=True, slots=True)
class Door:
    """What a POST must show before its handler runs.  *token*: how the form's token is
    checked (None: the link's own token is the only secret, as RFC 8058's one-click
    unsubscribe asks); *cross_site*: a POST from elsewhere is let in (mail providers post
    one-click unsubscribes from their own servers); *uploads*: a multipart body is left
    unread for the handler (a library, read in a process of its own), its token in the
    query's ``form``; *refused*: the forbidden page's words (``signup``, ``confirm``, or
    a reader's page); *retry*: the page's method that answers a form whose token has
    expired with the form again, as it was sent (the sign-up form's, after four hours)."""

    max_bytes: int = MAX_FORM_BYTES
    max_fields: int = 20
    token: TokenCheck | None = page_token
    cross_site: bool = False
    uploads: bool = False
    refused: str = ""
    retry: str = ""


RATING_DOOR = Door()
MANAGE_DOOR = Door(MAX_CHOICES_FORM_BYTES, MAX_CHOICES_FIELDS, uploads=True)
SIGNUP_DOOR = Door(MAX_CHOICES_FORM_BYTES, MAX_CHOICES_FIELDS, token=signup_pair, refused="signup", retry="expired")
CONFIRMATION_DOOR = Door(token=confirmation_token, refused="confirm")
ONE_CLICK_DOOR = Door(token=None, cross_site=True)

Handler = Callable[Concatenate[Any, Request, P], Awaitable[Response]]


def through(door: Door) -> Callable[[Handler[P]], Handler[P]]:
    """The decorator of a POST handler: *door*'s checks first (see the module)."""

    def decorate(handler: Handler[P]) -> Handler[P]:
        @functools.wraps(handler)
        async def guarded(page: Any, request: Request, *args: P.args, **kwargs: P.kwargs) -> Response:
            if request.method != "POST":
                return await handler(page, request, *args, **kwargs)
            refusal = await _knock(page, door, request)
            if refusal is not None:
                return refusal
            return await handler(page, request, *args, **kwargs)

        guarded.door = door  # type: ignore[attr-defined]  # read by the route table's test
        return cast(Handler[P], guarded)

    return decorate


def behind(door: Door) -> Callable[[Handler[P]], Handler[P]]:
    """Marks a route's handler whose POST goes through *door* in a method it calls once
    the link's token is found (the confirmation link: a forged token is answered 404
    whatever the method, and spends the budget forged tokens spend)."""

    def mark(handler: Handler[P]) -> Handler[P]:
        handler.door = door  # type: ignore[attr-defined]  # read by the route table's test
        return handler

    return mark


async def _knock(page: Page, door: Door, request: Request) -> Response | None:
    """None when the POST may go in (its form in ``request.state.form``), else the answer."""
    site = page.site
    if not door.cross_site and not same_origin(request, site.settings.web.public_url):
        return site.pages.forbidden(refused=door.refused)
    if door.uploads and is_multipart(request.headers.get("content-type", "")):
        if not form_token_ok(site.key, request.path_params["token"], request.query_params.get("form", "")):
            return site.pages.forbidden(refused=door.refused)
        request.state.form = {}
        return None
    form = await form_of(request, door.max_bytes, door.max_fields)
    if form is None:
        return too_large()
    if door.token is not None and not door.token(site.key, request, form):
        if door.retry:
            retry: Callable[[Form], Awaitable[Response]] = getattr(page, door.retry)
            return await retry(form)
        return site.pages.forbidden(refused=door.refused)
    request.state.form = form
    return None


def posted(request: Request) -> dict[str, list[str]]:
    """The form the door read for this POST."""
    form: dict[str, list[str]] = request.state.form
    return form
