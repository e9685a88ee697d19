"""Rankers stage, the call: one planning pass's requests to one outside ranker over
HTTP, each bounded in time and size, and the first failure that ends them.

A ranker can fail; a digest is never late.  Each request has a connect timeout, a
time for the whole answer (checked while its bytes arrive, so a ranker that answers a
byte a second is cut off too) and a size cap; a pass has a time for all its
requests.  A refused connection or a busy answer (429, 502-504) is tried again after
a back-off while the pass has time; a timeout is not (it would double the wait).  The
first failure ends the ranker's part in the pass: every later request is skipped, so
the rest of the readers get the built-in ranking at once, and the reason is kept for
the caller to log once and count.  Never reads or writes the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import httpx

from bot import __version__
from bot.domain.ranking import RankerCandidate, RankerReader, RankerScore
from bot.domain.text import one_line, plural
from bot.rankers.protocol import RankerFailure, read_answer, request_body

BUSY = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RankerLimits:
    connect_seconds: float = 2.0
    answer_seconds: float = 30.0  # one request's whole answer
    pass_seconds: float = 300.0  # every request of one planning pass
    max_answer_bytes: int = 16 * 2**20
    attempts: int = 3
    backoff_seconds: float = 0.5  # before the second attempt; doubled after each


@dataclass
class RankerCall:
    """One planning pass's use of the ranker at *url*."""

    url: str
    limits: RankerLimits = field(default_factory=RankerLimits)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    failure: str | None = None  # why this pass goes on without the ranker
    skipped: int = 0  # readers given the built-in ranking for that reason
    ranked: int = 0  # readers the ranker scored
    _ends: float = 0.0
    _client: httpx.Client | None = None  # one a pass: its TLS context is built once, its connection kept

    def __post_init__(self) -> None:
        self._ends = self.clock() + self.limits.pass_seconds

    def close(self) -> None:
        """The pass is over: its connection closed."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def scores(
        self, candidates: Mapping[int, RankerCandidate], readers: Sequence[RankerReader]
    ) -> dict[str, dict[int, RankerScore]] | None:
        """The ranker's scores for *readers*, None when it failed (now or earlier in
        the pass): those readers keep the built-in ranking."""
        if not readers:
            return {}
        if self.failure is None:
            try:
                scored = read_answer(self._ask(request_body(candidates, readers)), readers)
            except RankerFailure as failure:
                self.failure = str(failure)
            else:
                self.ranked += len(readers)
                return scored
        self.skipped += len(readers)
        return None

    def _ask(self, body: bytes) -> bytes:
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._post(body)
            except _Retryable as problem:
                wait = self.limits.backoff_seconds * 2 ** (attempt - 1)
                if attempt >= self.limits.attempts or self.clock() + wait >= self._ends:
                    raise RankerFailure(f"{problem} ({plural(attempt, 'attempt')})") from None
                self.sleep(wait)

    def _post(self, body: bytes) -> bytes:
        now = self.clock()
        left = self._ends - now
        if left <= 0:
            raise RankerFailure(f"the pass's {self.limits.pass_seconds:g} s for the ranker ran out")
        answer_ends = now + min(self.limits.answer_seconds, left)
        read = max(0.001, answer_ends - now)
        timeout = httpx.Timeout(connect=min(self.limits.connect_seconds, read), read=read, write=read, pool=read)
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": f"digestbot/{__version__}",
        }
        if self._client is None:
            self._client = httpx.Client(follow_redirects=False, trust_env=False)
        try:
            with self._client.stream("POST", self.url, content=body, headers=headers, timeout=timeout) as response:
                if response.status_code in BUSY:
                    raise _Retryable(f"answered {response.status_code}")
                if response.status_code != 200:
                    raise RankerFailure(f"answered {response.status_code}, not 200")
                if response.headers.get("Content-Encoding", "identity").lower() != "identity":
                    raise RankerFailure("answered compressed, though asked not to")
                return self._read(response, answer_ends)
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
            # A reset is what a kept-alive connection the ranker has just closed meets: asking
            # again (scores are the same whenever asked) goes over a new one.
            raise _Retryable(_transport_line(error)) from None
        except httpx.TimeoutException:
            raise RankerFailure(f"no whole answer within {read:.3g} s") from None
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            raise RankerFailure(_transport_line(error)) from None

    def _read(self, response: httpx.Response, answer_ends: float) -> bytes:
        cap = self.limits.max_answer_bytes
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > cap:
            raise RankerFailure(f"answer of {int(declared):,} bytes, over the cap of {cap:,}")
        received = bytearray()
        for chunk in response.iter_raw():
            received += chunk
            if len(received) > cap:
                raise RankerFailure(f"answer over the cap of {cap:,} bytes")
            if self.clock() > answer_ends:
                raise RankerFailure(f"no whole answer within {self.limits.answer_seconds:g} s")
        return bytes(received)


class _Retryable(Exception):
    """A failure another attempt may not meet: the ranker unreachable, closing or
    resetting the connection, or saying it is busy."""


def _transport_line(error: httpx.HTTPError | httpx.InvalidURL) -> str:
    return one_line(f"{type(error).__name__}: {error}")[:200] or type(error).__name__
