"""Subscriber endpoint: a reader's library uploaded on their manage page
(``POST /m/{token}`` as ``multipart/form-data``, with the page's form token), and
their ``liked`` threshold (the manage form's ``threshold`` action).

The file is read as ``subscribers library add`` reads it (``bot.taste.library``): a
bad record is one line on the page and the rest is added; a file that cannot be read
at all changes nothing.  The model learns it in the next planning pass (training
loads scikit-learn, which the endpoint never does).  A thin shell over
``bot.taste.service``: never writes SQL itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from bot.config import Settings
from bot.domain import Subscriber, SubscriberStatus
from bot.taste.library import LibraryFileError
from bot.taste.service import LibraryImport, import_library, set_taste_threshold
from bot.web.forms import MAX_UPLOAD_BYTES, form_token_ok, form_with_file, read_body, same_origin

ManagePage = Callable[..., Awaitable[Response]]
PROBLEMS_SHOWN = 5


class LibraryUploads:
    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        key: bytes,
        manage_page: ManagePage,
        forbidden: Callable[[], Response],
        now: Callable[[], datetime],
    ) -> None:
        self.settings, self.factory, self.key = settings, factory, key
        self.manage_page, self.forbidden, self.now = manage_page, forbidden, now

    async def upload(self, request: Request, subscriber: Subscriber) -> Response:
        if not same_origin(request, self.settings.web.public_url):
            return self.forbidden()
        body = await read_body(request, MAX_UPLOAD_BYTES)
        if body is None:
            limit = f"{MAX_UPLOAD_BYTES // 1_000_000} MB"
            return await self.manage_page(request, subscriber, 413, error=f"That file is larger than {limit}.")
        # Parsing megabytes is no work for the event loop that answers unsubscribes.
        fields, data = await run_in_threadpool(form_with_file, request.headers.get("content-type", ""), body, "library")
        if not form_token_ok(self.key, request.path_params["token"], fields.get("form", "")):
            return self.forbidden()
        if subscriber.status is SubscriberStatus.UNSUBSCRIBED:
            return await self.manage_page(request, subscriber, 409, error="You are unsubscribed: nothing was added.")
        if not data:
            return await self.manage_page(request, subscriber, 400, error="Choose a file to add.")
        try:
            found = await run_in_threadpool(import_library, self.factory, subscriber.id, data, self.now())
        except LibraryFileError as exc:
            return await self.manage_page(request, subscriber, 400, error=f"That file cannot be read: {exc}.")
        return await self.manage_page(request, subscriber, message=said(found), warning=problems(found))

    async def threshold(self, request: Request, subscriber: Subscriber, raw: str) -> Response:
        """Set the taste score above which their entries are ``liked`` (the manage page
        has checked the form token and the origin); a bad value changes nothing."""
        try:
            value = float(raw)
            await run_in_threadpool(set_taste_threshold, self.factory, subscriber.id, value, self.now())
        except ValueError:
            error = "The threshold must be a number from -5 to 5 (0.1 unless you changed it)."
            return await self.manage_page(request, subscriber, 400, error=error)
        changed = replace(subscriber, taste_threshold=value)
        return await self.manage_page(request, changed, message=f"Saved: liked means a taste score above {value:.2f}.")


def said(found: LibraryImport) -> str:
    """What the page says of an upload."""
    matched = sum(1 for p in found.added if p.entry_id is not None)
    papers = "paper" if len(found.added) == 1 else "papers"
    text = f"Added {len(found.added)} {papers} to your library ({matched} of them in our archive)"
    if found.already:
        text += f"; {found.already} were there already"
    return text + ". Your digests are ranked by it from the next one on."


def problems(found: LibraryImport) -> str | None:
    """The records that could not be read, the first few named."""
    if not found.problems:
        return None
    shown = "; ".join(found.problems[:PROBLEMS_SHOWN])
    more = f" and {len(found.problems) - PROBLEMS_SHOWN} more" if len(found.problems) > PROBLEMS_SHOWN else ""
    records = "record" if len(found.problems) == 1 else "records"
    return f"{len(found.problems)} {records} could not be read ({shown}{more})"
