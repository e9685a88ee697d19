"""Language-model stage, the call: requests to a model behind the OpenAI-compatible API
(``/chat/completions``, ``/embeddings``), each bounded in time and size.

A model can fail; a digest never waits for one.  Each request has a connect timeout, a
time for its whole answer (checked while the bytes arrive, so a model that dribbles is
cut off too) and a size cap; redirects are not followed, a streamed answer nobody asked
for and an answer that is not the API's JSON are that request's failure.  A 429 pauses
every later request until its ``Retry-After`` (at most ``PAUSE_CAP``): those are counted
as skipped, never sent; the caller keeps what is left of the pause for the next pass
(``paused_seconds``, ``pause_left``).  Failures are tallied by kind for the caller to log
once a pass and count.  Never reads or writes the store, never sends anything of a reader.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bot.bounded_http import COMPRESSED, TIMEOUT, TOO_LONG, UNREACHABLE, BoundedHttp, HttpFailure, HttpLimits
from bot.config.services import LlmConfig

T = TypeVar("T")
R = TypeVar("R")

PAUSE_CAP = 3600.0  # seconds a 429's Retry-After may pause the requests, at most


class LlmFailure(Exception):
    """One request's failure; ``kind`` is what it is tallied as."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    text: str  # the message's content, not yet judged (bot.llm.tldr.tldr_of does)
    tokens: int  # as the API reports them (0 when it does not)


@dataclass
class LlmCall:
    """One pass's requests to the model *settings* names."""

    settings: LlmConfig
    api_key: str = ""
    clock: Callable[[], float] = time.monotonic
    failures: Counter[str] = field(default_factory=Counter)  # kind -> requests
    skipped: int = 0  # not sent: the model asked for a pause
    sent: int = 0
    tokens: int = 0  # as the API reported them for the answers read
    paused_seconds: float = 0.0  # a pause an earlier pass was asked for, still running
    _paused_until: float = 0.0
    _http: BoundedHttp = field(default_factory=BoundedHttp)  # no redirect followed: a key never follows one
    # Requests may be in flight from several threads (``llm.concurrency``): the tallies,
    # the pause are changed under this lock (the HTTP client has its own).
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._started = self.clock()
        if self.paused_seconds > 0:
            self._paused_until = self._started + min(self.paused_seconds, PAUSE_CAP)

    def pause_left(self) -> float:
        """Seconds from this call's start until the model's last asked-for pause ends (0: none)."""
        return max(0.0, self._paused_until - self._started)

    def close(self) -> None:
        self._http.close()

    def chat(self, body: dict[str, Any]) -> ChatAnswer | None:
        """The answer to one chat-completions request, None when it failed (tallied)."""
        answer = self._json("/chat/completions", body)
        if answer is None:
            return None
        try:
            text = answer["choices"][0]["message"]["content"]
            if not isinstance(text, str):
                raise TypeError("content is not text")
        except (KeyError, IndexError, TypeError):
            self._tally("not the API's answer")
            return None
        self._tally(tokens=_tokens(answer))
        return ChatAnswer(text, _tokens(answer))

    def embed(self, model: str, texts: list[str]) -> list[list[float]] | None:
        """One vector per text, in order; None when the request failed (tallied)."""
        answer = self._json("/embeddings", {"model": model, "input": texts})
        if answer is None:
            return None
        self._tally(tokens=_tokens(answer))
        try:
            rows = answer["data"]
            indexes = [row["index"] for row in rows]
            # Each text's vector once: indexes 0 .. n-1 once each (all zero, repeated or missing
            # would store vectors against the wrong papers).
            if any(type(index) is not int for index in indexes) or sorted(indexes) != list(range(len(texts))):
                raise ValueError("not one index per text")
            rows = sorted(rows, key=lambda row: row["index"])
            vectors = [[float(x) for x in row["embedding"]] for row in rows]
            if len(vectors) != len(texts) or len({len(v) for v in vectors}) > 1:
                raise ValueError("not one vector of one size per text")
            if not all(math.isfinite(x) for vector in vectors for x in vector):
                raise ValueError("not a number in a vector")
        except (KeyError, TypeError, ValueError):
            self._tally("not the API's answer")
            return None
        return vectors

    def _json(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            paused = self.clock() < self._paused_until
            self.skipped += paused
            self.sent += not paused
        if paused:
            return None
        try:
            data = self._post(path, json.dumps(body).encode())
            try:
                answer = json.loads(data)
            except (ValueError, RecursionError):
                raise LlmFailure("not the API's answer", "answer is not JSON") from None
            if not isinstance(answer, dict):
                raise LlmFailure("not the API's answer", "answer is not a JSON object")
            return answer
        except LlmFailure as failure:
            self._tally(failure.kind)
            return None

    def _tally(self, failure: str | None = None, *, tokens: int = 0) -> None:
        with self._lock:
            if failure is not None:
                self.failures[failure] += 1
            self.tokens += tokens

    def _post(self, path: str, body: bytes) -> bytes:
        limits = self.settings
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        bounds = HttpLimits(limits.connect_seconds, limits.answer_seconds, limits.max_answer_kb * 1024)
        try:
            answer = self._http.request(
                "POST", limits.base_url + path, limits=bounds, headers=headers, content=body, before_body=self._check
            )
        except HttpFailure as failure:
            raise LlmFailure(_KINDS.get(failure.kind, UNREACHABLE), str(failure)) from None
        return answer.body

    def _check(self, status: int, headers: Mapping[str, str]) -> bool:
        if status == 429:
            with self._lock:
                self._paused_until = self.clock() + _retry_after(headers.get("Retry-After", ""))
            raise LlmFailure("busy (429)", "answered 429")
        if status != 200:
            kind = "server error (5xx)" if status >= 500 else "redirect" if 300 <= status < 400 else "refused (4xx)"
            raise LlmFailure(kind, f"answered {status}")
        if "event-stream" in headers.get("Content-Type", ""):
            raise LlmFailure("streamed", "answered a stream, though asked not to")
        return True


# The bounded reader's failures as a pass tallies them.
_KINDS = {TIMEOUT: "timeout", TOO_LONG: "too long", COMPRESSED: "not the API's answer"}


def _retry_after(value: str) -> float:
    """Seconds a 429's ``Retry-After`` asks for (a number of seconds; a date or nothing:
    one minute), within ``PAUSE_CAP``."""
    try:
        seconds = float(value.strip()) if value.strip().isascii() else 60.0
    except ValueError:
        seconds = 60.0
    return min(max(seconds, 0.0), PAUSE_CAP) if seconds == seconds else 60.0


def _tokens(answer: dict[str, Any]) -> int:
    usage = answer.get("usage")
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else 0


def answered(
    items: Iterable[T],
    ask: Callable[[T], R],
    *,
    concurrency: int,
    admit: Callable[[T], bool],
    keep_going: Callable[[], bool],
) -> Iterator[tuple[T, R]]:
    """Each of *items* that *admit* lets through (asked in order, just before it is sent:
    the budget), asked with *ask* at most *concurrency* at once, yielded with its answer in
    the order given, in the caller's thread.  A *keep_going* that turns false sends no
    more; those in flight are waited for (each bounded by the call's own limits)."""
    if concurrency <= 1:
        for item in items:
            if not keep_going():
                return
            if admit(item):
                yield item, ask(item)
        return
    in_flight: deque[tuple[T, Future[R]]] = deque()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="llm") as pool:
        for item in items:
            if not keep_going():
                break
            if not admit(item):
                continue
            in_flight.append((item, pool.submit(ask, item)))
            if len(in_flight) >= concurrency:
                item, answer = in_flight.popleft()
                yield item, answer.result()
        while in_flight:
            item, answer = in_flight.popleft()
            yield item, answer.result()
