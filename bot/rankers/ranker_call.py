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

from bot.bounded_http import UNREACHABLE, BoundedHttp, HttpFailure, HttpLimits
from bot.config.services import RankerConfig
from bot.domain.rankers import RankerCandidate, RankerReader, RankerScore
from bot.domain.text import plural
from bot.rankers.protocol import RankerFailure, read_answer, request_body

BUSY = frozenset({429, 502, 503, 504})


@dataclass
class RankerCall:
    """One planning pass's use of the ranker at *url*, within *limits* (the ``ranker``
    settings)."""

    url: str
    limits: RankerConfig
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    backoff_seconds: float = 0.5  # before the second attempt; doubled after each
    failure: str | None = None  # why this pass goes on without the ranker
    skipped: int = 0  # readers given the built-in ranking for that reason
    ranked: int = 0  # readers the ranker scored
    _ends: float = 0.0
    # One a pass: its TLS context built once, its connection kept.  No redirect is followed.
    _http: BoundedHttp = field(default_factory=BoundedHttp)

    def __post_init__(self) -> None:
        self._ends = self.clock() + self.limits.pass_seconds

    def close(self) -> None:
        """The pass is over: its connection closed."""
        self._http.close()

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
                wait = self.backoff_seconds * 2 ** (attempt - 1)
                if attempt >= self.limits.attempts or self.clock() + wait >= self._ends:
                    raise RankerFailure(f"{problem} ({plural(attempt, 'attempt')})") from None
                self.sleep(wait)

    def _post(self, body: bytes) -> bytes:
        now = self.clock()
        left = self._ends - now
        if left <= 0:
            raise RankerFailure(f"the pass's {self.limits.pass_seconds:g} s for the ranker ran out")
        limits = self.limits
        bounds = HttpLimits(limits.connect_seconds, min(limits.answer_seconds, left), limits.max_answer_mb * 2**20)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:
            answer = self._http.request(
                "POST", self.url, limits=bounds, headers=headers, content=body, before_body=_answered
            )
        except HttpFailure as failure:
            # A reset is what a kept-alive connection the ranker has just closed meets: asking
            # again (scores are the same whenever asked) goes over a new one.
            if failure.kind == UNREACHABLE:
                raise _Retryable(str(failure)) from None
            raise RankerFailure(str(failure)) from None
        return answer.body


def _answered(status: int, _: Mapping[str, str]) -> bool:
    if status in BUSY:
        raise _Retryable(f"answered {status}")
    if status != 200:
        raise RankerFailure(f"answered {status}, not 200")
    return True


class _Retryable(Exception):
    """A failure another attempt may not meet: the ranker unreachable, closing or
    resetting the connection, or saying it is busy."""
