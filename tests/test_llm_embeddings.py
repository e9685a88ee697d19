"""Embeddings (bot.llm.embedding, bot.store.embeddings), on SQLite and PostgreSQL: each
recent entry and each library paper embedded once per model and kept as a unit vector of
half floats (an entry and the library paper it is share one); hostile answers and a
model that is down leave the papers for the next pass; a real model (WordLlama, served
by the example in examples/embeddings/) gives vectors that put like papers together."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import LibraryPaper
from bot.domain.llm import MAX_DIMENSIONS, packed, unpacked
from bot.ingest.storing import ingest_bytes
from bot.llm.embedding import TEXTS_PER_REQUEST, embed_papers
from bot.store.embeddings import embeddings_of
from bot.store.facts import EMBEDDING_FAILURE_FACT, fact
from bot.store.library import add_papers
from bot.store.llm_tables import EmbeddingRow
from bot.store.schema import Entry, SubscriberRow
from bot.store.tldrs import spent_on
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from tests.conftest import ROOT
from tests.helpers import render_dump, settings_for
from tests.model_server import model_server

NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)
SINCE = NOW - timedelta(days=2)
RULES = load_rules(ROOT / "config" / "tags.toml")


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=40))
@example([9.480751908109176e153, 9.480751908109177e153])  # squares overflow: fsum raised
def test_a_vector_is_kept_at_unit_length_or_not_at_all(vector: list[float]) -> None:
    stored = packed(vector)
    if stored is None:
        return
    assert len(stored) == 2 * len(vector)
    parts = unpacked(stored)
    assert all(math.isfinite(x) for x in parts)
    assert math.isclose(math.sqrt(sum(x * x for x in parts)), 1.0, abs_tol=0.01)


def test_what_is_no_embedding_is_refused() -> None:
    assert packed([]) is None and packed([0.0, 0.0]) is None
    assert packed([math.nan, 1.0]) is None and packed([math.inf]) is None
    assert packed([1.0] * (MAX_DIMENSIONS + 1)) is None
    assert unpacked(packed([3.0, 4.0]) or b"") == pytest.approx((0.6, 0.8), abs=1e-3)


def _settings(tmp_path: Path, base_url: str, model: str = "honest") -> Settings:
    return settings_for(tmp_path, llm={"base_url": base_url, "embedding_model": model})


def _store(factory: sessionmaker[Session], settings: Settings, abstracts: list[str] | None = None) -> list[str]:
    """Papers of the day and a reader whose library holds one of them and one more; the keys."""
    abstracts = abstracts or [f"About attention {n}." for n in range(3)]
    papers = [(f"Paper {n}", ["Ada"], NOW.date(), text) for n, text in enumerate(abstracts)]
    ingest_bytes(factory, render_dump(papers).encode(), name="d", now=NOW, rules=RULES)
    save(factory, settings, [clean_fields("ada@example.org")], NOW)
    with factory() as session, session.begin():
        keys = list(session.scalars(select(Entry.key).order_by(Entry.id)))
        ada = session.scalars(select(SubscriberRow.id)).one()
        kept = [LibraryPaper(keys[0], "Paper 0"), LibraryPaper("doi:10.1/kept", "A kept paper", "On kernels.")]
        add_papers(session, ada, kept, NOW)
    return keys


def _stored(factory: sessionmaker[Session]) -> dict[str, str]:
    with factory() as session:
        return {key: model for key, model in session.execute(select(EmbeddingRow.key, EmbeddingRow.model))}


def test_entries_and_library_papers_are_embedded_once(factory: sessionmaker[Session], tmp_path: Path) -> None:
    with model_server() as server:
        settings = _settings(tmp_path, server.base_url)
        keys = _store(factory, settings)
        done = embed_papers(factory, settings, now=NOW, since=SINCE)
        again = embed_papers(factory, settings, now=NOW, since=SINCE)
    assert (done.wanted, done.stored, done.failures) == (4, 4, {})  # the entry kept in a library: once
    assert again.wanted == 0 and len(server.requests) == 1
    assert _stored(factory) == dict.fromkeys([*keys, "doi:10.1/kept"], "honest")
    sent = server.requests[0][2]
    assert sent["model"] == "honest" and len(sent["input"]) == 4
    assert "Paper 0\n\nAbout attention 0." in sent["input"] and "ada@example.org" not in str(sent)
    with factory() as session:
        assert spent_on(session, NOW.date()) == (1, 7)
        vectors = embeddings_of(session, keys, "honest")
        assert len(vectors) == 3 and all(len(v) == 6 for v in vectors.values())


def test_another_model_embeds_again(factory: sessionmaker[Session], tmp_path: Path) -> None:
    with model_server() as server:
        first = _settings(tmp_path, server.base_url)
        keys = _store(factory, first)
        embed_papers(factory, first, now=NOW, since=SINCE)
        second = _settings(tmp_path, server.base_url, model="other")
        done = embed_papers(factory, second, now=NOW, since=SINCE)
    assert done.stored == 4 and set(_stored(factory).values()) == {"other"}
    with factory() as session:
        assert embeddings_of(session, keys, "honest") == {}


@pytest.mark.parametrize(
    ("model", "outcome"),
    [
        ("broken", "server error (5xx)"),
        ("not-json", "not the API's answer"),
        ("wrong-shape", "not the API's answer"),
        ("redirect", "redirect"),
        ("zero", "refused"),
    ],
)
def test_a_failed_request_leaves_its_papers_for_the_next_pass(
    factory: sessionmaker[Session], tmp_path: Path, model: str, outcome: str
) -> None:
    with model_server() as server:
        settings = _settings(tmp_path, server.base_url, model=model)
        _store(factory, settings)
        done = embed_papers(factory, settings, now=NOW, since=SINCE)
        assert done.stored == 0 and done.outcomes()[outcome] >= 1, done
        assert _stored(factory) == {}
        honest = embed_papers(factory, _settings(tmp_path, server.base_url), now=NOW, since=SINCE)
    assert honest.stored == 4
    if outcome != "refused":
        with factory() as session:
            assert f"UTC: 1 {outcome}" in (fact(session, EMBEDDING_FAILURE_FACT) or "")


def test_a_pause_and_the_budget_leave_papers_unasked(factory: sessionmaker[Session], tmp_path: Path) -> None:
    abstracts = [f"Abstract {n}." for n in range(TEXTS_PER_REQUEST + 5)]
    with model_server() as server:
        busy = _settings(tmp_path, server.base_url, model="busy")
        _store(factory, busy, abstracts)
        paused = embed_papers(factory, busy, now=NOW, since=SINCE)
        assert paused.failures == {"busy (429)": 1} and paused.skipped == 1 and len(server.requests) == 1
        budget = busy.model_copy(
            update={"llm": _settings(tmp_path, server.base_url).llm.model_copy(update={"requests_per_day": 2})}
        )
        # The pause outlives the pass that got it (Retry-After: 120): the next pass sends nothing ...
        still = embed_papers(factory, budget, now=NOW + timedelta(seconds=60), since=SINCE)
        assert still.stored == 0 and still.skipped == 1 and len(server.requests) == 1
        # ... until it has run out.
        within = embed_papers(factory, budget, now=NOW + timedelta(seconds=121), since=SINCE)
    # The busy request counted one of the day's two: one more request, the rest left.
    assert within.stored == TEXTS_PER_REQUEST and within.over_budget == 6
    with factory() as session:
        assert spent_on(session, NOW.date())[0] == 2
        assert session.scalar(select(func.count()).select_from(EmbeddingRow)) == TEXTS_PER_REQUEST


# --- a real model -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_model_puts_like_papers_together(
    factory: sessionmaker[Session], tmp_path: Path, wordllama_url: str
) -> None:
    abstracts = [
        "We train spiking neural networks on neuromorphic hardware with surrogate gradients.",
        "Surrogate gradient learning for spiking neurons on a neuromorphic chip.",
        "A new sampler for Bayesian hierarchical models of crop yields.",
    ]
    settings = _settings(tmp_path, wordllama_url, model="wordllama-l2-256")
    keys = _store(factory, settings, abstracts)
    done = embed_papers(factory, settings, now=NOW, since=SINCE)
    assert done.stored == 4 and done.failures == {}
    with factory() as session:
        vectors = {key: unpacked(v) for key, v in embeddings_of(session, keys, "wordllama-l2-256").items()}
    assert {len(v) for v in vectors.values()} == {256}

    def cosine(a: str, b: str) -> float:
        return sum(x * y for x, y in zip(vectors[a], vectors[b], strict=True))

    assert cosine(keys[0], keys[1]) > cosine(keys[0], keys[2]) + 0.1
