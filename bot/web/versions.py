"""Subscriber endpoint: the web version of a sent digest, and its BibTeX.

``/d/TOKEN/DATE`` shows the subscriber's digest of that local date (the last one
sent) with every summary whole and "more like this" / "less like this" buttons
(``bot.web.feedback`` takes what they post); ``/d/TOKEN/DATE.bib`` is the BibTeX
of all its entries, ``/d/TOKEN/DATE/N.bib`` of entry N.  Reads only; never sends, never
decides who may see what (``bot.web.site.with_reader`` checks the token first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from bot.domain import DigestContent, DigestState, Subscriber
from bot.domain.routes import FEED, WEB_VERSION, WEB_VERSION_PART
from bot.mail.bibtex import bibtex_entry, bibtex_of
from bot.mail.parts import Parts
from bot.mail.render import Renderer, web_links
from bot.store.contents import digest_content
from bot.store.digests import list_digests
from bot.store.feedback import entry_ids_of, verdicts_on
from bot.store.retention import removed
from bot.web.forms import SECURITY_HEADERS, form_token
from bot.web.site import Site, with_reader

_DAY = re.compile(r"(\d{4}-\d{2}-\d{2})(\.bib)?")
_REF = re.compile(r"([1-9]\d{0,3})\.bib")


@dataclass(frozen=True, slots=True)
class VersionRequest:
    day: date
    bibtex: bool
    ref: int | None  # one entry's BibTeX; None: the page, or every entry


def wanted(day: str, ref: str | None) -> VersionRequest | None:
    """What a ``/d/`` path asks for; None for anything else (answered 404)."""
    found = _DAY.fullmatch(day)
    if found is None or (ref is not None and found.group(2)):
        return None
    try:
        when = date.fromisoformat(found.group(1))
    except ValueError:
        return None
    if ref is None:
        return VersionRequest(when, bool(found.group(2)), None)
    number = _REF.fullmatch(ref)
    return VersionRequest(when, True, int(number.group(1))) if number else None


class WebVersions:
    def __init__(self, loaded: Parts, read_only: sessionmaker[Session]) -> None:
        settings = loaded.settings
        self.settings, self.read_only = settings, read_only
        digest = settings.digest
        self.renderer = Renderer(
            settings.paths.templates_dir,
            search_url=digest.search_url,
            remote_images=digest.remote_images,
            summary_chars=0,
            keywords=loaded.keywords,
            fit=False,
            top_picks=digest.top_picks,
        )

    def content(self, subscriber: Subscriber, day: date) -> DigestContent | None:
        """The last digest of *day* sent to *subscriber* (blocking: run it in a thread)."""
        with self.read_only() as session:
            rows = list_digests(session, subscriber_id=subscriber.id, local_date=day)
            sent = next((row for row in rows if row.state is DigestState.SENT), None)
            return digest_content(session, sent.id) if sent is not None else None

    def removed(self, day: date) -> bool:
        """Whether retention removed the digests of *day* (``database.keep_days``)."""
        with self.read_only() as session:
            gone = removed(session)
        return gone is not None and day < gone.before.date()

    def page(self, content: DigestContent, token: str, form_token: str, verdicts: dict[int, str]) -> str:
        """The page, each entry with its "more like this" / "less like this" buttons
        (*verdicts*: what the subscriber said already, by the entry's number)."""
        context = self.renderer.context(content, web_links(self.settings.web.public_url, token))
        context.update(form_token=form_token, verdicts=verdicts)
        context["feed_url"] = FEED.url(self.settings.web.public_url, token=token)
        return self.renderer.render_context(context).html

    def verdicts(self, subscriber: Subscriber, content: DigestContent) -> dict[int, str]:
        """The subscriber's feedback on the digest's entries, by number (blocking)."""
        with self.read_only() as session:
            ids = entry_ids_of(session, [item.key for item in content.items])
            said = verdicts_on(session, subscriber.id, ids.values())
        refs = enumerate(content.items, start=1)
        return {ref: said[ids[item.key]] for ref, item in refs if ids.get(item.key) in said}

    def bibtex(self, content: DigestContent, ref: int | None) -> str | None:
        search = self.settings.digest.search_url
        if ref is None:
            return bibtex_of(content.items, search)
        if ref > len(content.items):
            return None
        return bibtex_entry(content.items[ref - 1], search)


class WebVersionPages:
    def __init__(self, site: Site, versions: WebVersions) -> None:
        self.site, self.versions = site, versions

    def routes(self) -> list[Route]:
        return [
            Route(WEB_VERSION.pattern, self.web_version, methods=["GET"]),
            Route(WEB_VERSION_PART.pattern, self.web_version, methods=["GET"]),
        ]

    @with_reader
    async def web_version(self, request: Request, subscriber: Subscriber) -> Response:
        """A sent digest with every summary whole, or its BibTeX."""
        site, versions = self.site, self.versions
        asked = wanted(request.path_params["day"], request.path_params.get("ref"))
        if asked is None:
            return site.pages.not_found()
        content = await run_in_threadpool(versions.content, subscriber, asked.day)
        if content is None:
            if await run_in_threadpool(versions.removed, asked.day):
                keep_days = site.settings.database.keep_days
                return site.pages.render("not_kept", 404, keep_days=keep_days, day=asked.day.isoformat())
            return site.pages.not_found()
        if not asked.bibtex:
            token = request.path_params["token"]
            verdicts = await run_in_threadpool(versions.verdicts, subscriber, content)
            page = await run_in_threadpool(versions.page, content, token, form_token(site.key, token), verdicts)
            return HTMLResponse(page, headers=SECURITY_HEADERS)
        text = versions.bibtex(content, asked.ref)
        if text is None:
            return site.pages.not_found()
        name = f"digest-{asked.day.isoformat()}" + (f"-{asked.ref}" if asked.ref else "")
        download = {"Content-Disposition": f'attachment; filename="{name}.bib"'}
        return Response(
            text, media_type="application/x-bibtex; charset=utf-8", headers={**SECURITY_HEADERS, **download}
        )
