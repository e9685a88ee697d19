"""Fetch a feed URL with httpx: timeouts, a size cap, ETag/Last-Modified.

The only module of the sources stage that does network I/O; it returns bytes
and validators and never parses or stores anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot import __version__
from bot.domain.text import shown_url

if TYPE_CHECKING:
    import httpx

USER_AGENT = f"digestbot/{__version__} (+https://github.com/digestbot)"


class FetchError(Exception):
    """A feed URL could not be fetched; ``str()`` is one line naming the URL as shown."""


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    not_modified: bool
    content: bytes = b""
    etag: str | None = None
    last_modified: str | None = None


def fetch(
    url: str,
    *,
    etag: str | None,
    last_modified: str | None,
    timeout: float,
    max_bytes: int,
    client: httpx.Client | None = None,
) -> Fetched:
    headers = {
        "User-Agent": USER_AGENT,
        "Accept": "application/rss+xml, application/atom+xml, application/feed+json, application/xml;q=0.9, */*;q=0.5",
    }
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    import httpx  # here, not at the top: httpx and what it imports cost every process that never fetches

    own_client = client is None
    client = client or httpx.Client(timeout=timeout, follow_redirects=True, max_redirects=5)
    shown = shown_url(url)
    try:
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code == 304:
                return Fetched(url, True, etag=etag, last_modified=last_modified)
            if response.status_code != 200:
                raise FetchError(f"{shown}: HTTP {response.status_code}")
            body = _read_body(response, shown, timeout=timeout, max_bytes=max_bytes)
            return Fetched(
                url,
                False,
                body,
                etag=response.headers.get("ETag"),
                last_modified=response.headers.get("Last-Modified"),
            )
    except httpx.TimeoutException:
        raise FetchError(f"{shown}: timed out after {timeout:g} s") from None
    except httpx.InvalidURL as exc:  # not an HTTPError: httpx raises it before any request
        raise FetchError(f"{shown}: not a URL that can be fetched ({_without(url, exc)})") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"{shown}: {type(exc).__name__}: {_without(url, exc)}") from None
    finally:
        if own_client:
            client.close()


def _read_body(response: httpx.Response, url: str, *, timeout: float, max_bytes: int) -> bytes:
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise FetchError(f"{url}: {declared} bytes exceeds feeds.max_bytes={max_bytes}")
    chunks: list[bytes] = []
    size = 0
    # httpx's timeout bounds each read, not the whole body: a server
    # dripping one byte at a time would otherwise hold us forever.
    deadline = time.monotonic() + timeout
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise FetchError(f"{url}: more than feeds.max_bytes={max_bytes} bytes")
        if time.monotonic() > deadline:
            raise FetchError(f"{url}: body not received within {timeout:g} s")
        chunks.append(chunk)
    return b"".join(chunks)


def _without(url: str, exc: Exception) -> str:
    """What *exc* says, on one line, with *url* in it as shown."""
    return " ".join(str(exc).replace(url, shown_url(url)).split())[:300]
