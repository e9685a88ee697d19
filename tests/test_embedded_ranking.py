"""The readers' models on embeddings as a challenger (bot.plan.scorers, bot.taste.embedded),
on SQLite and PostgreSQL: a reader with a library gets a digest interleaved between the
built-in (TF-IDF) order and their embeddings model's, pinned and judged by their ratings
as an outside ranker's is; a digest whose entries are not all embedded (the embedding
service down) keeps the built-in order; with a real model (WordLlama) end to end."""

from __future__ import annotations

import hashlib
import math
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain.llm import packed
from bot.domain.rankers import Interleaving
from bot.ingest.storing import ingest_bytes
from bot.llm.embedding import embed_papers
from bot.plan import plan
from bot.rankers.interleave import tallies
from bot.store.embeddings import save_embeddings
from bot.store.interleaved import judged_since
from bot.store.llm_tables import EmbeddingModelRow, EmbeddingRow
from bot.store.schema import Digest, Entry
from bot.store.taste_tables import LibraryPaperRow
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.taste.embedded import MIN_POSITIVES, as_matrix, train_embedded
from bot.taste.embedded_models import refresh_embedding_models
from bot.taste.library_service import give_feedback, import_library
from tests.conftest import ROOT
from tests.helpers import digest_entry_ids, render_dump, settings_for
from tests.test_challenger import TITLES

RULES = load_rules(ROOT / "config" / "tags.toml")
NOW = datetime(2026, 11, 23, 9, tzinfo=UTC)
TODAY = TITLES  # the outside ranker's day: the embeddings are judged on the same papers
EARLIER = [f"{topic} study {n}" for n in range(4) for topic in ("Graph store", "Protein", "Weather", "Compiler")]
LIBRARY = (
    b"@article{a, title = {Training spiking neural networks}, abstract = {Spiking neurons, surrogate gradients.}}\n"
    b"@article{b, title = {Spiking neurons on neuromorphic chips}, abstract = {Event-driven spiking hardware.}}"
)
TOPICS = ("spiking", "graph", "protein", "weather", "compiler")


def topic_vector(text_: str) -> bytes:
    """A made-up embedding: one dimension per topic the text names, and a little noise."""
    noise = hashlib.sha256(text_.encode()).digest()
    vector = [float(topic in text_.casefold()) + noise[n] / 2550 for n, topic in enumerate(TOPICS)]
    stored = packed([*vector, *(b / 2550 for b in noise[5:11])])
    assert stored is not None
    return stored


def _store(factory: sessionmaker[Session], tmp_path: Path, **llm: object) -> Settings:
    settings = settings_for(tmp_path, web={"signing_key": "k" * 32}, llm={"embedding_model": "m", **llm})
    people = [clean_fields(f"{who}@example.org", timezone="UTC", send_hour=8) for who in ("ada", "grace")]
    save(factory, settings, people, NOW - timedelta(days=1))
    for titles, at in ((EARLIER, NOW - timedelta(days=12)), (TODAY, NOW - timedelta(hours=2))):
        papers = [(title, ["A. Author"], at.date(), f"About {title.lower()}.") for title in titles]
        ingest_bytes(factory, render_dump(papers).encode(), name=f"d{at:%j}", now=at, rules=RULES)
    with factory() as session:
        ada = session.scalar(text("SELECT id FROM subscribers WHERE email = 'ada@example.org'"))
    import_library(factory, ada, LIBRARY, NOW - timedelta(hours=3))
    return settings


def _embed_by_topic(factory: sessionmaker[Session], *, train: bool = True) -> None:
    """Every paper embedded by topic, and (*train*) the readers' models trained on them."""
    with factory() as session, session.begin():
        papers = [
            *session.execute(select(Entry.key, Entry.title)),
            *session.execute(select(LibraryPaperRow.key, LibraryPaperRow.title)),
        ]
        vectors = [(key, topic_vector(title)) for key, title in papers]
        save_embeddings(session, vectors, "m", NOW - timedelta(hours=1))
    if train:
        report = refresh_embedding_models(factory, "m", NOW - timedelta(minutes=30))
        assert (report.trained, report.unfitted) == (1, 0)


def _orders(factory: sessionmaker[Session]) -> dict[str, tuple[int, list[str], list[str | None]]]:
    """Per reader: their digest, its titles in the order shown, and who placed each."""
    found = {}
    with factory() as session:
        titles = dict(session.execute(text("SELECT id, title FROM entries")).all())
        rows = session.execute(
            text("SELECT d.id, s.email, d.interleaving FROM digests d JOIN subscribers s ON s.id = d.subscriber_id")
        )
        for digest_id, email, drafted in rows.all():
            body = digest_entry_ids(session, digest_id)
            pinned = Interleaving.from_text(drafted, len(body))
            order = pinned.order if pinned else range(len(body))
            found[email.split("@")[0]] = (
                digest_id,
                [titles[body[n]] for n in order],
                [pinned.placed_by(n) if pinned else None for n in order],
            )
    return found


def test_a_reader_with_a_library_gets_their_embeddings_order_interleaved(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    settings = _store(factory, tmp_path)
    _embed_by_topic(factory)
    report = plan(factory, settings, RULES, now=NOW)
    assert report.ranker_failure is None and (report.ranker_ranked, report.ranker_skipped) == (1, 0)
    orders = _orders(factory)
    _, ada_titles, ada_placed = orders["ada"]
    _, grace_titles, grace_placed = orders["grace"]
    assert set(ada_placed) == {"built-in", "embeddings"} and grace_placed == [None] * len(grace_titles)
    assert sorted(ada_titles) == sorted(grace_titles) == sorted(TODAY)  # reordered, nothing chosen
    theirs = [t for t, by in zip(ada_titles, ada_placed, strict=True) if by == "embeddings"]
    assert "spiking" in theirs[0].casefold()  # the embeddings' first pick is about her papers


def test_entries_not_embedded_keep_the_built_in_order(factory: sessionmaker[Session], tmp_path: Path) -> None:
    settings = _store(factory, tmp_path)
    _embed_by_topic(factory)
    with factory() as session, session.begin():
        newest = session.scalar(select(Entry.key).order_by(Entry.id.desc()).limit(1))
        session.execute(delete(EmbeddingRow).where(EmbeddingRow.key == newest))
    report = plan(factory, settings, RULES, now=NOW)
    assert report.ranker_failure is None and (report.ranker_ranked, report.ranker_skipped) == (0, 1)
    assert {by for _, _, placed in _orders(factory).values() for by in placed} == {None}


def test_a_reader_without_a_model_yet_keeps_the_built_in_order(factory: sessionmaker[Session], tmp_path: Path) -> None:
    settings = _store(factory, tmp_path)
    _embed_by_topic(factory, train=False)  # embedded, but the daemon's job has not trained her model yet
    report = plan(factory, settings, RULES, now=NOW)
    assert (report.ranker_ranked, report.ranker_skipped) == (0, 1)


def test_a_model_is_trained_again_only_when_what_it_learns_from_changed(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    _store(factory, tmp_path)
    assert refresh_embedding_models(factory, "m", NOW).trained == 0  # nothing embedded: nothing to learn
    _embed_by_topic(factory)
    quiet = refresh_embedding_models(factory, "m", NOW)
    assert (quiet.trained, quiet.unfitted, quiet.removed) == (0, 0, 0)
    with factory() as session:
        ada = session.scalar(text("SELECT id FROM subscribers WHERE email = 'ada@example.org'"))
        grace = session.scalar(text("SELECT id FROM subscribers WHERE email = 'grace@example.org'"))
        spiking = session.scalar(select(Entry.id).where(Entry.title == TODAY[3]))
    give_feedback(factory, ada, spiking, "more", NOW)  # a rating: her model learns it
    assert refresh_embedding_models(factory, "m", NOW).trained == 1
    # Grace's two papers: one not embedded yet, so no model; once it is, one.
    import_library(factory, grace, b"@article{g, title = {Graph stores}}\n@article{h, title = {Graph planning}}", NOW)
    with factory() as session, session.begin():
        keys = list(session.scalars(select(LibraryPaperRow.key).where(LibraryPaperRow.subscriber_id == grace)))
        save_embeddings(session, [(keys[0], topic_vector("graph stores"))], "m", NOW)
    first = refresh_embedding_models(factory, "m", NOW + timedelta(minutes=1))
    assert (first.trained, first.unfitted) == (0, 1)
    assert refresh_embedding_models(factory, "m", NOW + timedelta(minutes=2)).unfitted == 0  # kept as unfitted
    with factory() as session, session.begin():
        save_embeddings(session, [(keys[1], topic_vector("graph planning"))], "m", NOW + timedelta(minutes=3))
    assert refresh_embedding_models(factory, "m", NOW + timedelta(minutes=4)).trained == 1
    with factory() as session, session.begin():
        session.execute(delete(LibraryPaperRow).where(LibraryPaperRow.subscriber_id == grace))
    assert refresh_embedding_models(factory, "m", NOW + timedelta(minutes=5)).removed == 1


@pytest.mark.parametrize("weights", [b"\x00\x01\x02", struct.pack("<11f", *([math.inf] * 11)), b""])
def test_a_restored_model_that_is_no_model_keeps_the_built_in_order(
    factory: sessionmaker[Session], tmp_path: Path, weights: bytes
) -> None:
    settings = _store(factory, tmp_path)
    _embed_by_topic(factory)
    with factory() as session, session.begin():
        session.execute(update(EmbeddingModelRow).values(weights=weights))
    report = plan(factory, settings, RULES, now=NOW)
    assert report.ranker_failure is None and (report.ranker_ranked, report.ranker_skipped) == (0, 1)
    assert {by for _, _, placed in _orders(factory).values() for by in placed} == {None}


def test_an_outside_ranker_named_wins_over_the_embeddings(factory: sessionmaker[Session], tmp_path: Path) -> None:
    settings = _store(factory, tmp_path)
    settings = settings.model_copy(update={"ranker": settings.ranker.model_copy(update={"url": "http://127.0.0.1:9/"})})
    _embed_by_topic(factory)
    report = plan(factory, settings, RULES, now=NOW)
    assert report.ranker_failure is not None  # the outside ranker was asked (nothing answers there)
    assert {by for _, _, placed in _orders(factory).values() for by in placed} == {None}


def test_a_readers_model_puts_their_kind_of_paper_first() -> None:
    rng = np.random.default_rng(7)

    def unit(rows: np.ndarray) -> np.ndarray:
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)

    topic = np.zeros(256, dtype=np.float32)
    topic[3] = 4.0
    theirs = unit(rng.normal(size=(20, 256)) + topic)
    sample = unit(rng.normal(size=(300, 256)))
    assert train_embedded(theirs[:1], sample[:0], sample) is None  # too few papers
    assert train_embedded(theirs[:MIN_POSITIVES], sample[:0], sample[:0]) is None  # nothing to tell them from
    model = train_embedded(theirs[:10], sample[:5], sample[5:])
    assert model is not None
    scores = model.scores(np.vstack([theirs[10:], sample[:10]]))
    assert scores[:10].min() > scores[10:].max()  # every unseen paper of theirs above every other
    assert as_matrix([]).shape == (0, 0) and math.isfinite(model.intercept)


@pytest.mark.slow
def test_a_real_model_ranks_and_the_readers_ratings_judge_it(
    factory: sessionmaker[Session], tmp_path: Path, wordllama_url: str
) -> None:
    settings = _store(factory, tmp_path, base_url=wordllama_url, embedding_model="wordllama-l2-256")
    embedded = embed_papers(factory, settings, now=NOW, since=NOW - timedelta(days=30))
    assert embedded.stored == len(TODAY) + len(EARLIER) + 2 and embedded.failures == {}
    assert refresh_embedding_models(factory, "wordllama-l2-256", NOW).trained == 1
    report = plan(factory, settings, RULES, now=NOW)
    assert (report.ranker_ranked, report.ranker_skipped) == (1, 0)
    digest_id, titles, placed = _orders(factory)["ada"]
    theirs = [t for t, by in zip(titles, placed, strict=True) if by == "embeddings"]
    assert "spiking" in theirs[0].casefold() or "surrogate" in theirs[0].casefold(), theirs
    # Ada says "more like this" of the embeddings' first pick: the report counts a win.
    with factory() as session, session.begin():
        session.execute(update(Digest).where(Digest.id == digest_id).values(state="sent", sent_at=NOW))
        picked = session.scalar(select(Entry.id).where(Entry.title == theirs[0]))
        ada = session.scalar(text("SELECT id FROM subscribers WHERE email = 'ada@example.org'"))
    give_feedback(factory, ada, picked, "more", NOW + timedelta(hours=1))
    with factory() as session:
        (found,) = tallies(judged_since(session, NOW - timedelta(days=1)))
    assert (found.ranker, found.digests, found.wins, found.losses) == ("embeddings", 1, 1, 0)
