"""Language-model stage, the day's budget: the requests and tokens every pass of the
day may spend on the model (``llm.requests_per_day``, ``llm.tokens_per_day``), counted
in one place for the TL;DR pass and the embedding pass alike.

A request is reserved before it is sent (requests in flight count against the day);
the tokens an answer reports are counted when it is read.  Never sends a request and
never writes the store: the pass writes what ``settle`` hands it, in its own
transaction with what the answer brought.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from sqlalchemy.orm import Session

from bot.config.services import LlmConfig
from bot.llm.client import LlmCall
from bot.store.tldrs import spent_on


@dataclass
class DayBudget:
    requests_per_day: int  # 0: no limit
    tokens_per_day: int  # 0: no limit
    requests: int  # spent today: counted in the store, and reserved by this pass
    tokens: int
    _settled: tuple[int, int] = (0, 0)  # the call's requests and tokens already handed over

    @classmethod
    def today(cls, session: Session, llm: LlmConfig, day: date) -> DayBudget:
        requests, tokens = spent_on(session, day)
        return cls(llm.requests_per_day, llm.tokens_per_day, requests, tokens)

    def follow(self, call: LlmCall) -> None:
        """Count what *call* spends from now on (what it spent before is counted)."""
        self._settled = (call.sent, call.tokens)

    def admit(self) -> bool:
        """Whether one more request may be sent today; when it may, it is reserved."""
        if _over(self.requests_per_day, self.requests) or _over(self.tokens_per_day, self.tokens):
            return False
        self.requests += 1
        return True

    def settle(self, call: LlmCall) -> tuple[int, int]:
        """The requests and tokens *call* spent since the last settling, to be written to
        the store; its tokens counted against the day."""
        requests, tokens = call.sent - self._settled[0], call.tokens - self._settled[1]
        self._settled = (call.sent, call.tokens)
        self.tokens += tokens
        return requests, tokens


def _over(limit: int, spent: int) -> bool:
    return limit > 0 and spent >= limit
