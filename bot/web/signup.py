"""Subscriber endpoint: the public sign-up page and the confirmation link (double opt-in).

``GET|POST /subscribe`` (only with ``web.signup = true``) takes an address and
digest choices; every accepted form gets the same answer, and the mail it
causes (``bot.subscribers.optin``) is sent after the answer, so neither the page nor its
timing tells whether an address is subscribed.  ``GET /c/{token}`` shows what
is being confirmed with a button; only its ``POST`` confirms, so a link
scanner that fetches every URL in a mail confirms nothing.  A thin shell:
never writes SQL, never logs addresses or tokens.
"""

from __future__ import annotations

import base64
import hashlib
import time

from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from bot.choose.filters import shown_filter
from bot.config import site_url
from bot.domain import Subscriber
from bot.domain.routes import CONFIRMATION, SIGNUP, base_path
from bot.plan.cadence import describe
from bot.subscribers.fields import SubscriberInputError
from bot.subscribers.optin import (
    Confirmation,
    Origin,
    Outgoing,
    check_confirmation,
    client_allowed,
    confirm,
    mail_not_sent,
    request_signup,
    send,
)
from bot.tokens import make_token
from bot.web.choices import ChoicesForm, hour_or, menu, read_signup
from bot.web.doors import CONFIRMATION_DOOR, CSRF_COOKIE, SIGNUP_DOOR, behind, posted, through
from bot.web.forms import address_of, csrf_pair, form_token
from bot.web.limits import client_key
from bot.web.site import Site

# Puts the browser's own zone first in the time zone menu, chosen (an alias it reports
# is stored as the zone it names); without script the default stays.
ZONE_SCRIPT = (
    '(function(){var s=document.getElementById("timezone");if(!s||s.dataset.chosen)return;'
    "try{var z=Intl.DateTimeFormat().resolvedOptions().timeZone;if(!z)return;"
    'var o=document.createElement("option");o.value=z;o.textContent=z+" (this device\'s zone)";'
    "s.insertBefore(o,s.firstChild);s.value=z;}catch(e){}})();"
)
ZONE_SCRIPT_HASH = base64.b64encode(hashlib.sha256(ZONE_SCRIPT.encode()).digest()).decode()


class SignupPages:
    def __init__(self, site: Site) -> None:
        self.site = site
        self.settings, self.factory, self.key, self.now = site.settings, site.factory, site.key, site.now
        self.render = site.pages.render
        public = site_url(site.settings.web)
        self.page_url = SIGNUP.url(public)
        self.cookie_path = base_path(public) + SIGNUP.path()  # the page's own path, behind a proxy too
        self.secure_cookie = public.startswith("https://")

    def routes(self) -> list[Route]:
        """The confirmation link always (a link already mailed keeps working when sign-up
        is turned off); the sign-up form only with ``web.signup``."""
        confirmation = Route(CONFIRMATION.pattern, self.confirmation, methods=["GET", "POST"])
        if not self.settings.web.signup:
            return [confirmation]
        return [confirmation, Route(SIGNUP.pattern, self.subscribe, methods=["GET", "POST"])]

    async def form_page(
        self, status_code: int = 200, *, values: dict[str, list[str]] | None = None, error: str | None = None
    ) -> HTMLResponse:
        field, cookie = csrf_pair(self.key, time.time())
        values = values or {}
        chosen_zone = (values.get("timezone") or [""])[0]
        schedule = self.settings.schedule
        form = ChoicesForm(
            menu(await self.site.tag_menu.tags(), values.get("tag", [])),
            (values.get("filter") or [""])[0],
            (values.get("cadence") or ["daily"])[0],
            chosen_zone or schedule.default_timezone,
            hour_or((values.get("send_hour") or [""])[0], schedule.default_send_hour),
            zone_chosen=bool(chosen_zone),
        )
        response = self.render(
            "signup",
            status_code,
            headers={"Content-Security-Policy": _csp_with_script()},
            csrf=field,
            error=error,
            email=(values.get("email") or [""])[0],
            name=(values.get("name") or [""])[0],
            form=form,
            zone_script=ZONE_SCRIPT,
        )
        response.set_cookie(
            CSRF_COOKIE,
            cookie,
            max_age=4 * 3600,
            path=self.cookie_path,
            httponly=True,
            samesite="strict",
            secure=self.secure_cookie,
        )
        return response

    async def expired(self, form: dict[str, list[str]]) -> Response:
        """The sign-up door's answer to a form without its live token: the form again, as sent."""
        error = "This form has expired or did not come from this site: please send it again."
        return await self.form_page(403, values=form, error=error)

    @through(SIGNUP_DOOR)
    async def subscribe(self, request: Request) -> Response:
        if request.method in ("GET", "HEAD"):
            return await self.form_page()
        form = posted(request)
        try:
            fields = read_signup(form)
        except SubscriberInputError as exc:
            return await self.form_page(400, values=form, error=str(exc))
        client = address_of(request)
        now = self.now()
        if not await run_in_threadpool(client_allowed, self.factory, self.settings, client_key(client), now):
            return self.render("too_many_signups", 429, headers={"Retry-After": "3600"})
        origin = Origin(self.page_url, client, "sign-up form")
        outgoing = await run_in_threadpool(
            request_signup, self.factory, self.settings, self.key, fields, origin=origin, now=now
        )
        task = BackgroundTask(self._send, outgoing, fields.email) if outgoing is not None else None
        return self.render("signup_sent", email=fields.email, hours=self.settings.web.confirm_hours, background=task)

    async def _send(self, outgoing: Outgoing, email: str) -> None:
        if not await send(self.settings, outgoing):
            await run_in_threadpool(mail_not_sent, self.factory, email)

    @behind(CONFIRMATION_DOOR)
    async def confirmation(self, request: Request) -> Response:
        """The page behind a confirmation link, or (a POST from it) the confirmation, once
        the link's token is found: a forged one is answered 404 and spends the budget
        forged link tokens spend, whatever the method."""
        token = request.path_params["token"]
        state, subscriber = await run_in_threadpool(check_confirmation, self.factory, self.key, token, self.now())
        if state is Confirmation.UNKNOWN or subscriber is None:
            self.site.by_token.miss(request)
            return self.site.pages.not_found()
        if request.method in ("GET", "HEAD") or state is not Confirmation.CONFIRMED:
            return self._confirm_page(state, subscriber, token)
        return await self.confirming(request)

    @through(CONFIRMATION_DOOR)
    async def confirming(self, request: Request) -> Response:
        token = request.path_params["token"]
        origin = Origin(f"{site_url(self.settings.web)}{CONFIRMATION.prefix}", address_of(request), "confirmation link")
        state, subscriber = await run_in_threadpool(
            confirm, self.factory, self.key, token, origin=origin, now=self.now()
        )
        if subscriber is None:
            return self.site.pages.not_found()
        return self._confirm_page(state, subscriber, token)

    def _confirm_page(self, state: Confirmation, subscriber: Subscriber, token: str) -> HTMLResponse:
        """The page behind a confirmation link: a button while there is something to
        confirm, else what happened, with the manage link once they are subscribed."""
        done = subscriber.status.subscribed
        return self.render(
            "confirm_signup",
            410 if state is Confirmation.EXPIRED else 200,
            subscriber=subscriber,
            state=state.value,
            confirm_form=form_token(self.key, "confirm:" + token),
            manage_token=make_token(self.key, subscriber.id, subscriber.unsubscribe_secret) if done else "",
            describe=describe,
            shown_filter=shown_filter,
        )


def _csp_with_script() -> str:
    return (
        "default-src 'none'; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{ZONE_SCRIPT_HASH}'; form-action 'self'; frame-ancestors 'none'"
    )
