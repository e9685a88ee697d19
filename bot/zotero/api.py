"""Zotero stage, the client: the few requests digestbot makes of the Zotero Web API (v3),
over ``bot.bounded_http`` (bounded in time and size, no redirect followed: the key must
never go to another host).

One ``ZoteroApi`` serves every reader of a pass: at most ``zotero.in_flight`` requests
at once, and a ``Backoff`` or ``Retry-After`` one reader's request was answered with
holds every reader's next request until it has passed (it is the host's, not the
reader's).  A request answered 429 or 503, or not answered because the connection was
refused or reset, is asked again while its wait fits ``longest_wait_seconds``; a longer
wait ends the pass for everyone (``ZoteroBusy``).  A 403 or 404 is the reader's
connection's (``ZoteroRefused``); anything else wrong is that request's
(``ZoteroTrouble``).  Never reads or writes the store; never logs the key.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlencode, urlsplit

from bot.bounded_http import UNREACHABLE, BoundedHttp, HttpAnswer, HttpFailure, HttpLimits
from bot.config.services import ZoteroConfig
from bot.domain.text import plural
from bot.zotero.api_shapes import (
    PAGE_SIZE,
    KeyAccess,
    ZoteroAnswerError,
    ZoteroItem,
    library_version,
    next_link,
    read_collections,
    read_deleted,
    read_items,
    read_key,
    read_versions,
    wait_asked,
    written_key,
)

API_VERSION = "3"
BUSY = frozenset({429, 503})
MAX_COLLECTION_PAGES = 50  # 5,000 collections: more is a server going round in circles


class ZoteroTrouble(Exception):
    """This request got no usable answer: asked again in the next pass."""


class ZoteroBusy(ZoteroTrouble):
    """The server asked every client to wait longer than a pass waits."""


class ZoteroRefused(Exception):
    """403 or 404: the key was revoked or the library is gone (the connection is broken)."""

    def __init__(self, status: int) -> None:
        said = "the key was refused (revoked, or no longer allowed this library)" if status == 403 else ""
        super().__init__(said or "the library is not there any more")
        self.status = status


class WriteTokenUsed(Exception):
    """412 to a write with a write token: an earlier attempt with it made the item."""


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed in a library since a version: ``None`` when nothing did (304)."""

    version: int
    items: list[ZoteroItem]
    deleted: list[str]
    requests: int
    listed: frozenset[str] = frozenset()  # every key the versions named, fetched or not


@dataclass
class Counts:
    requests: int = 0
    waited_seconds: float = 0.0


class ZoteroApi:
    def __init__(
        self,
        config: ZoteroConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.clock, self.sleep = clock, sleep
        self.counts = Counts()
        self._http = BoundedHttp()
        self._slots = threading.BoundedSemaphore(config.in_flight)
        self._lock = threading.Lock()
        self._not_before = 0.0  # the host's Backoff / Retry-After, for every reader

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ZoteroApi:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the requests -----------------------------------------------------------

    def key_access(self, key: str) -> KeyAccess:
        return _read(read_key, self._get("/keys/current", key).body)

    def changes(
        self,
        library: str,
        key: str,
        since: int,
        *,
        wanted: Callable[[ZoteroItem], bool] = lambda _: True,
        most: int | None = None,
    ) -> Changes | None:
        """What changed in *library* since version *since*: the items changed or made
        (notes and attachments among them, for the caller to leave out), fetched
        ``PAGE_SIZE`` at a time, the most recently changed first, until *most* of them
        are *wanted*; and the keys deleted.  None when nothing changed."""
        params = {"since": since, "format": "versions", "includeTrashed": 1}
        first = self._get(f"/{library}/items/top", key, params, since=since)
        if first.status == 304:
            return None
        versions = _read(read_versions, first.body)
        version = _read(library_version, first.headers)
        requests = 1
        items: dict[str, ZoteroItem] = {}
        kept = 0
        changed = sorted(versions, key=lambda k: (-versions[k], k))  # newest first: a cap keeps them
        for start in range(0, len(changed), PAGE_SIZE):
            if most is not None and kept >= most:
                break  # the library keeps no more: the older items are not fetched
            page = changed[start : start + PAGE_SIZE]
            # The API's default page is 25 even for keys named: ask for all 50.
            asked = {"itemKey": ",".join(page), "includeTrashed": 1, "limit": PAGE_SIZE}
            answer = self._get(f"/{library}/items", key, asked)
            requests += 1
            for item in _read(read_items, answer.body):
                if item.key in versions and item.key not in items:  # one a page repeats, or never asked for, is left
                    items[item.key] = item
                    kept += wanted(item)
        deleted: list[str] = []
        if since:
            answer = self._get(f"/{library}/deleted", key, {"since": since})
            requests += 1
            deleted = _read(read_deleted, answer.body)
        return Changes(version, list(items.values()), deleted, requests, frozenset(versions))

    def collections(self, library: str, key: str) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        path, params = f"/{library}/collections", {"limit": 100}
        for _ in range(MAX_COLLECTION_PAGES):
            answer = self._get(path, key, params)
            found.extend(_read(read_collections, answer.body))
            following = next_link(answer.headers)
            if following is None:
                return list(dict.fromkeys(found))
            path, params = self._same_host(following), {}
        return list(dict.fromkeys(found))

    def find(self, library: str, key: str, words: str) -> list[ZoteroItem]:
        """Items whose fields mention *words* (a DOI, an arXiv address)."""
        params = {"q": words, "qmode": "everything", "limit": 25}
        return _read(read_items, self._get(f"/{library}/items", key, params).body)

    def create(self, library: str, key: str, item: Mapping[str, object], write_token: str) -> str:
        """Make *item*; its key.  ``WriteTokenUsed`` when an earlier attempt with
        *write_token* made it already."""
        import json

        body = json.dumps([item]).encode("utf-8")
        headers = {"Content-Type": "application/json", "Zotero-Write-Token": write_token}
        answer = self._ask("POST", f"/{library}/items", key, headers=headers, content=body)
        if answer.status == 412:
            raise WriteTokenUsed()
        _expect(answer, (200,))
        return _read(written_key, answer.body)

    # -- one request, paced ---------------------------------------------------------

    def _get(
        self, path: str, key: str, params: Mapping[str, object] | None = None, *, since: int | None = None
    ) -> HttpAnswer:
        headers = {"If-Modified-Since-Version": str(since)} if since else {}
        query = f"?{urlencode(params)}" if params else ""
        answer = self._ask("GET", path + query, key, headers=headers)
        _expect(answer, (200, 304) if since else (200,))
        return answer

    def _same_host(self, url: str) -> str:
        """The path and query of a ``Link`` to follow: only on the API's own host."""
        ours, theirs = urlsplit(self.config.base_url), urlsplit(url)
        if (theirs.scheme, theirs.netloc) != (ours.scheme, ours.netloc) or not theirs.path.startswith(ours.path):
            raise ZoteroTrouble("a Link header points away from the API")
        return theirs.path[len(ours.path.rstrip("/")) :] + (f"?{theirs.query}" if theirs.query else "")

    def _ask(
        self, method: str, path: str, key: str, *, headers: Mapping[str, str], content: bytes | None = None
    ) -> HttpAnswer:
        config = self.config
        limits = HttpLimits(config.connect_seconds, config.answer_seconds, config.max_answer_mb * 2**20)
        sent = {"Zotero-API-Version": API_VERSION, "Zotero-API-Key": key, "Accept": "application/json", **headers}
        attempt = 0
        while True:
            attempt += 1
            self._wait_turn()
            with self._slots:
                self.counts.requests += 1
                try:
                    answer = self._http.request(
                        method, config.base_url + path, limits=limits, headers=sent, content=content
                    )
                except HttpFailure as failure:
                    if failure.kind != UNREACHABLE or attempt >= config.attempts:
                        raise ZoteroTrouble(str(failure)) from None
                    self._hold(min(2.0 ** (attempt - 1), config.longest_wait_seconds))
                    continue
            asked = wait_asked(answer.headers)
            if answer.status in BUSY:
                wait = asked if asked is not None else 2.0 ** (attempt - 1)
                if wait > config.longest_wait_seconds:
                    self._hold(wait)
                    raise ZoteroBusy(f"answered {answer.status}: asked to wait {wait:g} s")
                self._hold(wait)
                if attempt >= config.attempts:
                    raise ZoteroTrouble(f"answered {answer.status} ({plural(attempt, 'attempt')})")
                continue
            if asked is not None:  # Backoff on a good answer: the next request waits
                self._hold(asked)
            return answer

    def _hold(self, seconds: float) -> None:
        with self._lock:
            self._not_before = max(self._not_before, self.clock() + seconds)

    def _wait_turn(self) -> None:
        with self._lock:
            wait = self._not_before - self.clock()
        if wait > self.config.longest_wait_seconds:
            raise ZoteroBusy(f"asked to wait {wait:.0f} s more")
        if wait > 0:
            self.counts.waited_seconds += wait
            self.sleep(wait)


def _expect(answer: HttpAnswer, statuses: tuple[int, ...]) -> None:
    if answer.status in statuses:
        return
    if answer.status in (403, 404):
        raise ZoteroRefused(answer.status)
    if 300 <= answer.status < 400:
        raise ZoteroTrouble(f"answered {answer.status} (a redirect, not followed with the key)")
    raise ZoteroTrouble(f"answered {answer.status}")


T = TypeVar("T")


def _read(reader: Callable[..., T], *args: object) -> T:
    try:
        return reader(*args)
    except ZoteroAnswerError as error:
        raise ZoteroTrouble(f"a wrong answer: {error}") from None
