"""Outside bytes over HTTP: one request to a server digestbot does not run,
bounded in time, in size and in redirects.

Every request to an outside server (a feed, a model, a ranker, a subscriber's Zotero
library, a chat room) goes through ``BoundedHttp.request``, so each has a connect
timeout, a deadline for its whole answer (checked while the bytes arrive: a server
that dribbles a byte a second is cut off too, where httpx's timeout bounds each read
only), a byte cap (a declared length over it refused before any byte is read) and
redirects only where its caller allows them: a feed may move, a model or a ranker that
answers with a redirect has answered wrong, and an API key must never follow one.

Never parses or keeps what it reads, never logs: a failure's line shows the URL as
``shown_url`` does (no password, no token in it), so a caller may log it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot import __version__
from bot.domain.text import one_line, shown_url

if TYPE_CHECKING:
    import httpx

USER_AGENT = f"digestbot/{__version__} (+https://github.com/digestbot)"

# What a failure is, for the caller to count and to word: a request that met
# UNREACHABLE may be tried again (the server refused, reset or closed the connection);
# the others would meet the same again, or double the wait.
TIMEOUT = "timeout"
TOO_LONG = "too long"
UNREACHABLE = "unreachable"
BROKEN = "broken"
NOT_A_URL = "not a URL"
COMPRESSED = "compressed"


class HttpFailure(Exception):
    """A request that got no whole answer; ``kind`` is one of the names above and
    ``str()`` one line that shows no secret of the URL."""

    def __init__(self, kind: str, detail: str, *, maybe_sent: bool = True) -> None:
        super().__init__(detail)
        self.kind = kind
        # False only when the request surely never reached the server (no connection
        # was made): a request that may have taken effect is never sent again blind.
        self.maybe_sent = maybe_sent


@dataclass(frozen=True, slots=True)
class HttpLimits:
    connect_seconds: float
    answer_seconds: float  # from the request's start to its answer's last byte
    max_bytes: int  # of the answer as read (after decoding, where the caller allows it)


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    headers: Mapping[str, str]  # as httpx holds them: names in any case
    body: bytes  # b"" when the caller's look at status and headers said not to read it


# Told the status and headers before any byte of the body: raises the caller's own
# failure to refuse the answer, returns False to take it without its body (a 304).
BeforeBody = Callable[[int, Mapping[str, str]], bool]


def _read_all(status: int, headers: Mapping[str, str]) -> bool:
    return True


class BoundedHttp:
    """One client's requests: its connections kept between them (one TLS set-up), safe
    to use from several threads.

    *redirects* is how many a request may follow (0: a redirect is the answer, for the
    caller to refuse); *decoded* lets the server compress its answer (a feed) where the
    callers that ask for none refuse one that comes compressed; *proxies_from_env*
    honours ``HTTPS_PROXY`` and the like, as a feed app does."""

    def __init__(
        self,
        *,
        redirects: int = 0,
        decoded: bool = False,
        proxies_from_env: bool = False,
        keep_alive: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redirects = redirects
        # False: a connection for each request, so that a server closing an idle one is
        # never read as a request lost after it went out (a chat post must tell).
        self.keep_alive = keep_alive
        self.decoded = decoded
        self.proxies_from_env = proxies_from_env
        self.clock = clock
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> BoundedHttp:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        limits: HttpLimits,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        before_body: BeforeBody = _read_all,
    ) -> HttpAnswer:
        """The answer to one request, its body read within *limits*; HttpFailure when
        there is no whole answer.  *before_body* sees the status and headers first."""
        import httpx  # here, not at the top: httpx costs every process that never asks

        ends = self.clock() + limits.answer_seconds
        answer_seconds = max(0.001, limits.answer_seconds)
        timeout = httpx.Timeout(
            connect=min(limits.connect_seconds, answer_seconds),
            read=answer_seconds,
            write=answer_seconds,
            pool=answer_seconds,
        )
        sent = {"User-Agent": USER_AGENT, **({} if self.decoded else {"Accept-Encoding": "identity"})}
        sent.update(headers or {})
        try:
            with self._open().stream(
                method,
                url,
                content=content,
                headers=sent,
                timeout=timeout,
                follow_redirects=self.redirects > 0,
            ) as response:
                if not before_body(response.status_code, response.headers):
                    return HttpAnswer(response.status_code, response.headers, b"")
                body = self._body(response, ends, limits)
                return HttpAnswer(response.status_code, response.headers, body)
        except (httpx.ConnectTimeout, httpx.PoolTimeout):
            raise HttpFailure(TIMEOUT, "no connection within the time allowed", maybe_sent=False) from None
        except httpx.TimeoutException:
            raise HttpFailure(TIMEOUT, f"no whole answer within {round(limits.answer_seconds, 2):g} s") from None
        except httpx.InvalidURL as error:  # not an HTTPError: httpx raises it before any request
            raise HttpFailure(NOT_A_URL, _line(url, error)) from None
        except httpx.ConnectError as error:
            raise HttpFailure(UNREACHABLE, _line(url, error), maybe_sent=False) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
            raise HttpFailure(UNREACHABLE, _line(url, error)) from None
        except httpx.HTTPError as error:
            raise HttpFailure(BROKEN, _line(url, error)) from None

    def _open(self) -> httpx.Client:
        import httpx

        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    follow_redirects=False,
                    max_redirects=max(self.redirects, 1),
                    trust_env=self.proxies_from_env,
                    limits=httpx.Limits(max_connections=100, max_keepalive_connections=20 if self.keep_alive else 0),
                )
            return self._client

    def _body(self, response: httpx.Response, ends: float, limits: HttpLimits) -> bytes:
        cap = limits.max_bytes
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > cap:
            raise HttpFailure(TOO_LONG, f"answer of {int(declared):,} bytes, over the cap of {cap:,}")
        if not self.decoded and response.headers.get("Content-Encoding", "identity").lower() != "identity":
            raise HttpFailure(COMPRESSED, "answered compressed, though asked not to")
        received = bytearray()
        chunks = response.iter_bytes() if self.decoded else response.iter_raw()
        for chunk in chunks:
            received += chunk
            if len(received) > cap:
                raise HttpFailure(TOO_LONG, f"answer over the cap of {cap:,} bytes")
            if self.clock() > ends:
                raise HttpFailure(TIMEOUT, f"no whole answer within {round(limits.answer_seconds, 2):g} s")
        return bytes(received)


def _line(url: str, error: Exception) -> str:
    """What *error* says, on one line, with *url* in it as shown."""
    said = one_line(f"{type(error).__name__}: {str(error).replace(url, shown_url(url))}")
    return said[:300] or type(error).__name__
