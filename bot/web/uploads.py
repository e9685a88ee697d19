"""Subscriber endpoint: a reader's library uploaded on their manage page
(``POST /m/{token}`` as ``multipart/form-data``, with the page's form token), and
their ``liked`` threshold (the manage form's ``threshold`` action).

Nothing of the body is read before every check that can refuse it (the form
token, which the form sends in its address, the size it declares, the reader's
status and hourly allowance), and at most ``UPLOAD_BYTES_IN_FLIGHT`` of upload bodies
are held at once.  The file is read as ``subscribers library add`` reads it (``bot.taste.library``), in a
process of its own (``bot.web.upload_process``): a bad record is one line on the page and
the rest is added; a file that cannot be read at all changes nothing.  A reader uploads
at most ``subscribers.library_uploads_per_hour`` files an hour, and their library holds
at most ``subscribers.library_max_papers`` papers.  The model learns it in the next planning pass (training
loads scikit-learn, which the endpoint never does).  A thin shell over
``bot.taste.library_service``: never writes SQL itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from bot.domain import Subscriber, SubscriberStatus
from bot.taste import ranking_installed
from bot.taste.library import LibraryFileError
from bot.taste.library_service import LibraryImport, add_library, set_taste_threshold, upload_allowed
from bot.web.forms import MAX_UPLOAD_BYTES, discard_body, form_with_file, read_body
from bot.web.manage_view import PageNotice
from bot.web.site import Site
from bot.web.upload_process import read_upload

PROBLEMS_SHOWN = 5
READ_SECONDS = 60.0  # a 5 MB export of the worst shape reads in about 20 s
# Upload bytes the server holds at once, whatever the number of uploads sent together.
UPLOAD_BYTES_IN_FLIGHT = 4 * MAX_UPLOAD_BYTES


class LibraryUploads:
    def __init__(self, site: Site) -> None:
        self.site = site
        self.reading = asyncio.Semaphore(1)  # uploads take turns: at most one core goes to reading them
        self.in_flight = 0  # bytes of upload bodies being received now

    async def upload(self, request: Request, subscriber: Subscriber) -> PageNotice | Response:
        """Everything that can refuse an upload is asked before a byte of its body is read
        (the page's form token travels in the form's address for that); the bytes read
        at once are bounded for the whole server."""
        refused = await self._refusal(request, subscriber)
        if isinstance(refused, PageNotice) and refused.status_code in (409, 429):
            # A refusal the reader is meant to read: their browser sends the whole file first.
            await discard_body(request, MAX_UPLOAD_BYTES)
        if refused is not None:
            return refused
        size = int(request.headers["content-length"])
        if self.in_flight + size > UPLOAD_BYTES_IN_FLIGHT:
            await discard_body(request, size)  # read and dropped: nothing of it is held
            error = "Other files are being added right now: please try again in a minute."
            return PageNotice(503, error=error)
        self.in_flight += size
        try:
            body = await read_body(request, size)
        finally:
            self.in_flight -= size
        if body is None:
            return PageNotice(400, error="That file did not arrive whole.")
        # Taking the form apart is milliseconds for 5 MB of any bytes (python-multipart);
        # reading the file is not, and happens in a process of its own below.
        _fields, data = form_with_file(request.headers.get("content-type", ""), body, "library")
        if not data:
            return PageNotice(400, error="Choose a file to add.")
        try:
            async with self.reading:
                read = await read_upload(data, READ_SECONDS)
        except LibraryFileError as exc:
            return PageNotice(400, error=f"That file cannot be read: {exc}.")
        most = self.site.settings.subscribers.library_max_papers
        found = await run_in_threadpool(add_library, self.site.factory, subscriber.id, read, self.site.now(), most=most)
        return PageNotice(message=said(found), warning=problems(found, most))

    async def _refusal(self, request: Request, subscriber: Subscriber) -> PageNotice | Response | None:
        """Why this upload is refused, from its headers and the store alone; None when it is
        not.  Its origin and token were checked at the manage page's door (``bot.web.doors``)."""
        declared = request.headers.get("content-length", "")
        if not declared.isascii() or not declared.isdigit():
            return PageNotice(411, error="Your browser did not say the file's size.")
        if int(declared) > MAX_UPLOAD_BYTES:
            limit = f"{MAX_UPLOAD_BYTES // 1_000_000} MB"
            return PageNotice(413, error=f"That file is larger than {limit}.")
        if subscriber.status is SubscriberStatus.UNSUBSCRIBED:
            return PageNotice(409, error="You are unsubscribed: nothing was added.")
        per_hour = self.site.settings.subscribers.library_uploads_per_hour
        if not await run_in_threadpool(upload_allowed, self.site.factory, subscriber.id, per_hour, self.site.now()):
            error = f"You uploaded {per_hour} files in the last hour: please try again later."
            return PageNotice(429, error=error)
        return None

    async def threshold(self, subscriber: Subscriber, raw: str) -> tuple[Subscriber, PageNotice]:
        """Set the taste score above which their entries are ``liked`` (the manage page
        has checked the form token and the origin); a bad value changes nothing.  The
        reader as changed, and what the page says."""
        try:
            value = float(raw)
            await run_in_threadpool(set_taste_threshold, self.site.factory, subscriber.id, value, self.site.now())
        except ValueError:
            error = "The threshold must be a number from -5 to 5 (0.1 unless you changed it)."
            return subscriber, PageNotice(400, error=error)
        changed = replace(subscriber, taste_threshold=value)
        return changed, PageNotice(message=f"Saved: liked means a taste score above {value:.2f}.")


def said(found: LibraryImport) -> str:
    """What the page says of an upload."""
    matched = sum(1 for p in found.added if p.entry_id is not None)
    papers = "paper" if len(found.added) == 1 else "papers"
    text = f"Added {len(found.added)} {papers} to your library ({matched} of them in our archive)"
    if found.already:
        text += f"; {found.already} were there already"
    if not ranking_installed():
        return text + ". This site does not rank digests by a library yet: it is kept for when it does."
    return text + ". Your digests are ranked by it from the next one on."


def problems(found: LibraryImport, most: int) -> str | None:
    """The records that could not be read, the first few named, and the papers that did
    not fit."""
    said = []
    if found.problems:
        shown = "; ".join(found.problems[:PROBLEMS_SHOWN])
        more = f" and {len(found.problems) - PROBLEMS_SHOWN} more" if len(found.problems) > PROBLEMS_SHOWN else ""
        records = "record" if len(found.problems) == 1 else "records"
        said.append(f"{len(found.problems)} {records} could not be read ({shown}{more})")
    if found.over:
        papers = "paper was" if found.over == 1 else "papers were"
        said.append(f"{found.over} {papers} not added: a library holds at most {most:,} papers")
    return "; ".join(said) or None
