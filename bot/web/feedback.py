"""Subscriber endpoint: "more like this" / "less like this" on an entry of a sent digest.

``GET /d/TOKEN/DATE/N/more`` (or ``/less``), the link beside each entry of the email,
only shows the entry and one button to confirm: link scanners and prefetchers GET
every URL in a message, and must record nothing.  ``POST`` to the same address with
the page's form token records the verdict, replaces the other one, or undoes it
(``action`` = more | less | undo); the web version's buttons post the same.  Only
entries of a digest that was sent to the subscriber can be rated.  A thin shell
over ``bot.taste.library_service``: never sends, never writes SQL itself, never trains (the
next planning pass does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.domain import Subscriber, SubscriberStatus
from bot.domain.routes import RATING
from bot.mail.prose import title_text
from bot.store.feedback import VERDICTS, entry_ids_of, verdicts_on
from bot.taste.library_service import give_feedback
from bot.web.doors import RATING_DOOR, behind, posted, through
from bot.web.site import Site, with_reader
from bot.web.versions import WebVersions

_REF = re.compile(r"[1-9]\d{0,3}")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
ACTIONS = (*VERDICTS, "undo")
_SAID = {"more": "Noted: more like this.", "less": "Noted: less like this.", "undo": "Undone."}


@dataclass(frozen=True, slots=True)
class Rated:
    """What a rating address names: the digest's day, the entry's number in it, the verdict asked."""

    day: date
    ref: int
    verdict: str


def rated(day: str, ref: str, verdict: str) -> Rated | None:
    """What ``/d/TOKEN/DATE/N/VERDICT`` asks for; None for anything else (answered 404)."""
    if verdict not in VERDICTS or not _DAY.fullmatch(day) or not _REF.fullmatch(ref):
        return None
    try:
        return Rated(date.fromisoformat(day), int(ref), verdict)
    except ValueError:
        return None


class FeedbackPages:
    def __init__(self, site: Site, versions: WebVersions) -> None:
        self.site, self.versions = site, versions

    def routes(self) -> list[Route]:
        return [Route(RATING.pattern, self.rate, methods=["GET", "POST"])]

    @with_reader
    @behind(RATING_DOOR)
    async def rate(self, request: Request, subscriber: Subscriber) -> Response:
        """The confirmation page (GET), or the verdict recorded (POST), once the address
        names an entry of a digest the reader was sent (404 otherwise, whatever the method)."""
        params = request.path_params
        asked = rated(params["day"], params["ref"], params["verdict"])
        found = await run_in_threadpool(self._entry, subscriber, asked) if asked is not None else None
        if asked is None or found is None:
            return self.site.pages.not_found()
        if request.method in ("GET", "HEAD"):
            said = await run_in_threadpool(self._said, subscriber, found[0])
            left = subscriber.status is SubscriberStatus.UNSUBSCRIBED
            return self.site.pages.render(
                "rate", token=params["token"], said=said, left=left, done=None, title=found[1], asked=asked
            )
        return await self.record(request, subscriber, asked, found)

    @through(RATING_DOOR)
    async def record(
        self, request: Request, subscriber: Subscriber, asked: Rated, found: tuple[int, str, str]
    ) -> Response:
        site, render = self.site, self.site.pages.render
        entry_id, title, section = found
        token = request.path_params["token"]
        left = subscriber.status is SubscriberStatus.UNSUBSCRIBED
        action = (posted(request).get("action") or [""])[0]
        if left or action not in ACTIONS:
            said = await run_in_threadpool(self._said, subscriber, entry_id)
            status = 409 if left else 400
            return render("rate", status, token=token, said=said, left=left, done=None, title=title, asked=asked)
        verdict = None if action == "undo" else action
        await run_in_threadpool(give_feedback, site.factory, subscriber.id, entry_id, verdict, site.now(), section)
        asked = replace(asked, verdict=verdict or asked.verdict)
        return render("rate", token=token, said=verdict, left=False, done=_SAID[action], title=title, asked=asked)

    def _entry(self, subscriber: Subscriber, asked: Rated) -> tuple[int, str, str] | None:
        return sent_entry(self.versions, subscriber, asked)

    def _said(self, subscriber: Subscriber, entry_id: int) -> str | None:
        with self.versions.read_only() as session:
            return verdicts_on(session, subscriber.id, [entry_id]).get(entry_id)


def sent_entry(versions: WebVersions, subscriber: Subscriber, asked: Rated) -> tuple[int, str, str] | None:
    """The stored entry the number names in the digest sent that day, its title, and the
    interest it was shown under there ('' in a digest of one); None when there is none."""
    content = versions.content(subscriber, asked.day)
    if content is None or asked.ref > len(content.items):
        return None
    item = content.items[asked.ref - 1]
    with versions.read_only() as session:
        entry_id = entry_ids_of(session, [item.key]).get(item.key)
    return (entry_id, title_text(item.content.title), item.section or "") if entry_id is not None else None
