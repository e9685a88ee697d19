"""The day's model budget (bot.llm.budget): one count for the TL;DR and embedding passes."""

from __future__ import annotations

from bot.config.services import LlmConfig
from bot.llm.budget import DayBudget
from bot.llm.client import LlmCall


def test_a_request_is_reserved_before_it_is_sent_and_the_limit_holds() -> None:
    budget = DayBudget(requests_per_day=3, tokens_per_day=0, requests=1, tokens=0)
    assert [budget.admit() for _ in range(4)] == [True, True, False, False]
    assert budget.requests == 3


def test_tokens_count_when_settled_and_close_the_day() -> None:
    call = LlmCall(LlmConfig())
    budget = DayBudget(requests_per_day=0, tokens_per_day=100, requests=0, tokens=40)
    call.sent, call.tokens = 2, 5  # spent before the budget followed it: counted already
    budget.follow(call)
    assert budget.admit()
    call.sent, call.tokens = 3, 65
    assert budget.settle(call) == (1, 60) and budget.tokens == 100
    assert budget.settle(call) == (0, 0)  # handed over once
    assert not budget.admit()


def test_no_limit_is_zero() -> None:
    budget = DayBudget(requests_per_day=0, tokens_per_day=0, requests=10**9, tokens=10**12)
    assert budget.admit()
