"""Fetch a feed URL: a conditional GET (ETag/Last-Modified) through the bounded HTTP client.

The only module of the sources stage that does network I/O; it returns bytes and
validators and never parses or stores anything.  A feed may move (redirects followed,
at most ``FEED_REDIRECTS``) and may come compressed; its time and size are the
``feeds`` settings'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bot.bounded_http import NOT_A_URL, TIMEOUT, TOO_LONG, BoundedHttp, HttpFailure, HttpLimits
from bot.domain.text import shown_url

FEED_REDIRECTS = 5
ACCEPT = "application/rss+xml, application/atom+xml, application/feed+json, application/xml;q=0.9, */*;q=0.5"


class FetchError(Exception):
    """A feed URL could not be fetched; ``str()`` is one line naming the URL as shown."""


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    not_modified: bool
    content: bytes = b""
    etag: str | None = None
    last_modified: str | None = None


def feed_http() -> BoundedHttp:
    """The client a round of feed fetches shares (its connections kept between feeds)."""
    return BoundedHttp(redirects=FEED_REDIRECTS, decoded=True, proxies_from_env=True)


def fetch(
    url: str,
    *,
    etag: str | None,
    last_modified: str | None,
    timeout: float,
    max_bytes: int,
    http: BoundedHttp,
) -> Fetched:
    headers = {"Accept": ACCEPT}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    shown = shown_url(url)

    def changed(status: int, _: Mapping[str, str]) -> bool:
        if status == 304:
            return False
        if status != 200:
            raise FetchError(f"{shown}: HTTP {status}")
        return True

    limits = HttpLimits(connect_seconds=timeout, answer_seconds=timeout, max_bytes=max_bytes)
    try:
        answer = http.request("GET", url, limits=limits, headers=headers, before_body=changed)
    except HttpFailure as failure:
        raise FetchError(f"{shown}: {_worded(failure, timeout, max_bytes)}") from None
    if answer.status == 304:
        return Fetched(url, True, etag=etag, last_modified=last_modified)
    return Fetched(
        url,
        False,
        answer.body,
        etag=answer.headers.get("ETag"),
        last_modified=answer.headers.get("Last-Modified"),
    )


def _worded(failure: HttpFailure, timeout: float, max_bytes: int) -> str:
    if failure.kind == TIMEOUT:
        return f"timed out after {timeout:g} s"
    if failure.kind == TOO_LONG:
        return f"more than feeds.max_bytes={max_bytes} bytes"
    if failure.kind == NOT_A_URL:
        return f"not a URL that can be fetched ({failure})"
    return str(failure)
