"""The requests to a model behind the OpenAI-compatible API (bot.llm.client), against a
local server that answers honestly or in each hostile way (tests/model_server.py)."""

from __future__ import annotations

import pytest

from bot.config.services import LlmConfig
from bot.llm.client import LlmCall
from bot.llm.tldr import tldr_of, tldr_request
from tests.model_server import HONEST_ANSWER, HONEST_TLDR, model_server


def _call(base_url: str, **limits: object) -> LlmCall:
    """A call that gives an honest answer all the time a loaded machine may need."""
    settings = LlmConfig.model_validate(
        {"base_url": base_url, "chat_model": "honest", "answer_seconds": 60.0, "max_answer_kb": 64} | limits
    )
    return LlmCall(settings, api_key="sk-test-key")


def _body(model: str) -> dict:
    return tldr_request(model, title="Sparse attention", authors=("Ada",), abstract="We do it fast.", language="de")


def test_an_honest_answer_and_what_was_sent() -> None:
    with model_server() as server:
        call = _call(server.base_url)
        answer = call.chat(_body("honest"))
        call.close()
    assert answer is not None and answer.text == HONEST_ANSWER and answer.tokens == 102
    assert tldr_of(answer.text) == HONEST_TLDR
    (path, headers, body) = server.requests[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-test-key"
    assert body["stream"] is False and "Language: de" in body["messages"][1]["content"]
    assert call.sent == 1 and not call.failures


@pytest.mark.parametrize(
    ("model", "kind"),
    [
        ("hang", "timeout"),
        ("dribble", "timeout"),
        ("broken", "server error (5xx)"),
        ("redirect", "redirect"),
        ("not-json", "not the API's answer"),
        ("nested", "not the API's answer"),
        ("stream", "streamed"),
        ("huge", "too long"),
        ("wrong-shape", "not the API's answer"),
    ],
)
def test_each_hostile_answer_is_that_requests_failure_tallied_by_kind(model: str, kind: str) -> None:
    with model_server() as server:
        call = _call(server.base_url, answer_seconds=1.0)  # the deadline a hang or a dribble meets
        assert call.chat(_body(model)) is None
        # The next request is asked as usual, given all the time a loaded machine may need.
        call.settings = call.settings.model_copy(update={"answer_seconds": 60.0})
        assert call.chat(_body("honest")) is not None
        call.close()
    assert call.failures == {kind: 1} and call.sent == 2


def test_a_429_pauses_every_later_request_until_its_retry_after() -> None:
    with model_server() as server:
        now = [1000.0]
        call = _call(server.base_url)
        call.clock = lambda: now[0]
        assert call.chat(_body("busy")) is None
        assert call.chat(_body("honest")) is None and call.embed("honest", ["a"]) is None  # not sent
        assert len(server.requests) == 1 and call.skipped == 2
        now[0] += 121  # the answer said Retry-After: 120
        assert call.chat(_body("honest")) is not None
        call.close()
    assert call.failures == {"busy (429)": 1} and len(server.requests) == 2


def test_a_model_that_is_not_there_is_one_failure_per_request() -> None:
    call = _call("http://127.0.0.1:9/v1")
    assert call.chat(_body("honest")) is None and call.embed("honest", ["a"]) is None
    assert call.failures == {"unreachable": 2}


@pytest.mark.parametrize("model", ["index-zero", "index-repeated", "index-shifted", "index-true", "index-text"])
def test_embeddings_whose_indexes_are_not_each_text_once_are_refused(model: str) -> None:
    """Twenty vectors all at index 0 were stored against the wrong papers: an answer is
    taken only when its indexes are exactly 0 .. n-1, once each."""
    with model_server() as server:
        call = _call(server.base_url)
        vectors = call.embed(model, [f"paper {n}" for n in range(20)])
        call.close()
    assert vectors is None and call.failures == {"not the API's answer": 1}


def test_embeddings_come_back_in_the_order_of_the_texts() -> None:
    with model_server() as server:
        call = _call(server.base_url)
        vectors = call.embed("honest", ["a", "bbb", "cc"])
        call.close()
    assert vectors == [[1.0, 0.0, 1.0], [3.0, 1.0, 1.0], [2.0, 2.0, 1.0]]
    assert server.requests[0][0] == "/v1/embeddings" and server.requests[0][2]["input"] == ["a", "bbb", "cc"]
