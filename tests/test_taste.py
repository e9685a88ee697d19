"""Ranking by the reader's taste: the TF-IDF features match scikit-learn's, a model is
trained from a library and only when its signals change, and on the seeds a `*`
reader whose library holds two spiking-network papers gets day 3's two SNN
accelerators first, with the why line naming their paper; a reader without a library
keeps the filter's order exactly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.ingest.storing import ingest_file
from bot.plan import plan
from bot.store.contents import digest_content
from bot.store.digests import list_digests
from bot.store.subscribers import get_subscriber
from bot.store.taste_tables import TasteModel
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import remove, save
from bot.taste.features import RowCache, Vocabulary, fit_vocabulary, vectors, words
from bot.taste.library_service import import_library
from bot.taste.training import refresh_models
from tests.conftest import ROOT
from tests.helpers import settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY1 = datetime(2026, 6, 14, 12, tzinfo=UTC)

# Two spiking-network papers the store does not hold: their export carries title and abstract.
SNN_LIBRARY = (Path(__file__).parent / "fixtures" / "library" / "snn.bib").read_text(encoding="utf-8")

TEXTS = st.lists(
    st.text(st.sampled_from("abcdefghij nerual spike gpu \n-é"), min_size=0, max_size=60), min_size=1, max_size=12
)


@given(TEXTS)
def test_our_vectors_are_scikit_learns(texts: list[str]) -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    fitted = TfidfVectorizer(analyzer=words, sublinear_tf=True, dtype=np.float32)
    try:
        fitted.fit(texts)
    except ValueError:  # no words at all: nothing to compare
        return
    vocabulary = Vocabulary(1, tuple(fitted.get_feature_names_out()), fitted.idf_.astype(np.float32))
    ours, theirs = vectors(texts, vocabulary), fitted.transform(texts)
    assert np.allclose(ours.toarray(), theirs.toarray(), atol=1e-6)


@given(TEXTS, st.lists(st.integers(min_value=0, max_value=11), max_size=30))
def test_rows_made_once_and_reused_are_the_rows_made_afresh(texts: list[str], picks: list[int]) -> None:
    """A training pass reuses each text's row (``RowCache``): the matrices, and so the
    models, are the same bytes as without it, whatever order and repeats the texts come in."""
    terms, idf = fit_vocabulary(texts + ["spike gpu nerual", "gpu spike"])
    vocabulary = Vocabulary(1, tuple(terms), idf.astype(np.float32))
    cache = RowCache(vocabulary)
    for chosen in ([texts[i % len(texts)] for i in picks], texts, list(reversed(texts)), []):
        made, reused = vectors(chosen, vocabulary), vectors(chosen, vocabulary, cache)
        assert made.shape == reused.shape
        for field in ("indptr", "indices", "data"):
            assert np.array_equal(getattr(made, field), getattr(reused, field))
            assert getattr(made, field).dtype == getattr(reused, field).dtype
    with pytest.raises(ValueError, match="another vocabulary"):
        vectors(texts, Vocabulary(2, tuple(terms), idf.astype(np.float32)), cache)


def test_a_full_row_cache_starts_afresh_and_stays_right() -> None:
    terms, idf = fit_vocabulary(["spike gpu", "gpu fpga", "fpga spike"])
    vocabulary = Vocabulary(1, tuple(terms), idf.astype(np.float32))
    cache = RowCache(vocabulary)
    cache.LIMIT = 2
    texts = ["spike gpu", "gpu fpga", "fpga spike", "spike gpu"]
    assert np.array_equal(vectors(texts, vocabulary, cache).toarray(), vectors(texts, vocabulary).toarray())
    assert len(cache.rows) <= 2


def test_fit_vocabulary_keeps_words_and_pairs_without_stop_words() -> None:
    terms, idf = fit_vocabulary(["Spiking neural networks on an FPGA", "Neural networks for the GPU"])
    assert "spiking" in terms and "neural networks" in terms and "the" not in terms and "an" not in terms
    assert len(idf) == len(terms)


def _subscribe(factory: sessionmaker[Session], settings: Settings, email: str, filter_text: str = "*") -> int:
    save(factory, settings, [clean_fields(email, filter=filter_text, backfill="none")], DAY1 - timedelta(days=1))
    with factory() as session:
        found = get_subscriber(session, email)
    assert found is not None
    return found.id


def _replay(
    factory: sessionmaker[Session], settings: Settings, seed_files: list[Path], *, library: bool
) -> dict[str, list[list[tuple[str, str]]]]:
    """Each subscriber's digests, day by day: (title, why) of each entry in order."""
    reader = _subscribe(factory, settings, "reader@example.org")
    _subscribe(factory, settings, "plain@example.org")
    if library:
        report = import_library(factory, reader, SNN_LIBRARY.encode(), DAY1 - timedelta(days=1))
        assert len(report.added) == 2 and all(p.entry_id is None for p in report.added)
    days: dict[str, list[list[tuple[str, str]]]] = {}
    for day, path in enumerate(seed_files):
        now = DAY1 + timedelta(days=day)
        ingest_file(factory, path, now=now, rules=RULES)
        planned = plan(factory, settings, RULES, now=now, all_due=True).planned
        with factory() as session:
            for digest_id in planned:
                content = digest_content(session, digest_id)
                days.setdefault(content.subscriber.email, []).append([(i.content.title, i.why) for i in content.items])
    return days


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_for(tmp_path, digest={"max_entries": 30})


def test_a_library_of_snn_papers_puts_day_3s_snn_accelerators_first(
    factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]
) -> None:
    days = _replay(factory, settings, seed_files, library=True)
    day3 = days["reader@example.org"][2]
    assert len(day3) == 9  # day 3 brings 9 entries new to this reader
    top = [title for title, _ in day3[:2]]
    assert any(t.startswith("SupraSNN") for t in top) and any(t.startswith("ReSCom") for t in top), top
    for _, why in day3[:2]:
        assert why.startswith("close to: '") and why.endswith("' from your library"), why
        assert "Spiking Neural Networks on Neuromorphic Hardware" in why or "Leaky Integrate-and-Fire" in why
    # a reader without a library keeps "matches everything" and the filter's order
    assert all(why == "matches everything" for day in days["plain@example.org"] for _, why in day)


def test_a_reader_of_two_interests_keeps_the_models_note_under_each_section(
    factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]
) -> None:
    reader = _subscribe(factory, settings, "two@example.org", "Spiking: snn; Everything else: *")
    import_library(factory, reader, SNN_LIBRARY.encode(), DAY1 - timedelta(days=1))
    for day, path in enumerate(seed_files[:3]):
        ingest_file(factory, path, now=DAY1 + timedelta(days=day), rules=RULES)
        planned = plan(factory, settings, RULES, now=DAY1 + timedelta(days=day), all_due=True).planned
    with factory() as session:
        items = digest_content(session, list(planned)[-1]).items
    spiking = [i for i in items if i.section == "Spiking"]
    assert {i.content.title.split(":")[0] for i in spiking} >= {"SupraSNN", "ReSCom"}
    assert items[: len(spiking)] == tuple(spiking)  # the first section first
    for item in spiking:
        assert item.why.startswith("Spiking · snn: ") and "; also in Everything else" in item.why
        assert item.taste is not None
    close = [i.content.title.split(":")[0] for i in spiking if "; also in Everything else; close to: '" in i.why]
    assert {"SupraSNN", "ReSCom"} <= set(close)  # the model's note stays, after the interests


def test_without_a_library_the_order_is_exactly_the_filters(
    factory: sessionmaker[Session], settings: Settings, seed_files: list[Path], tmp_path: Path
) -> None:
    with_models = _replay(factory, settings, seed_files, library=True)
    from bot.store.engine import make_engine, sessions, upgrade

    other = make_engine(f"sqlite:///{tmp_path / 'other.sqlite3'}")
    upgrade(other)
    without = _replay(sessions(other), settings, seed_files, library=False)
    other.dispose()
    assert with_models["plain@example.org"] == without["plain@example.org"]
    assert with_models["reader@example.org"] != without["reader@example.org"]


def test_models_are_trained_only_when_their_signals_change(
    factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]
) -> None:
    reader = _subscribe(factory, settings, "reader@example.org")
    for path in seed_files:
        ingest_file(factory, path, now=DAY1, rules=RULES)
    import_library(factory, reader, SNN_LIBRARY.encode(), DAY1)
    first = refresh_models(factory, DAY1)
    assert (first.vocabulary_fitted, first.trained) == (True, 1)
    assert refresh_models(factory, DAY1).trained == 0, "nothing changed"
    import_library(factory, reader, b"2401.00001\n", DAY1)
    assert refresh_models(factory, DAY1).trained == 1, "the library grew"
    with factory() as session:
        row = session.scalars(select(TasteModel)).one()
        # int32 indices and float32 weights, one of each per kept weight, at most 2,000
        assert 0 < len(row.indices) == len(row.weights) <= 4 * 2000
    remove(factory, "reader@example.org", purge=True, now=DAY1)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(TasteModel)) == 0


def test_models_trained_together_are_the_models_trained_alone(
    factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]
) -> None:
    """A pass that trains many readers shares the entries' texts and rows between them:
    each model is the same, byte for byte, as when its reader is trained alone."""
    readers = [_subscribe(factory, settings, f"r{n}@example.org") for n in range(3)]
    for path in seed_files:
        ingest_file(factory, path, now=DAY1, rules=RULES)
    for n, reader in enumerate(readers):
        import_library(factory, reader, SNN_LIBRARY.encode() + f"\n2401.0000{n}\n".encode(), DAY1)

    def models() -> dict[int, tuple[bytes, bytes, float]]:
        with factory() as session:
            return {m.subscriber_id: (m.indices, m.weights, m.intercept) for m in session.scalars(select(TasteModel))}

    assert refresh_models(factory, DAY1).models == 3
    together = models()
    alone = {}
    for reader in readers:
        with factory() as session:
            session.execute(TasteModel.__table__.delete())
            session.commit()
        assert refresh_models(factory, DAY1, only=[reader]).models == 1
        alone[reader] = models()[reader]
    assert together == alone


def test_one_paper_is_not_a_model(factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]) -> None:
    reader = _subscribe(factory, settings, "reader@example.org")
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    import_library(factory, reader, b"2401.00001\n", DAY1)
    assert refresh_models(factory, DAY1).trained == 0
    with factory() as session:
        assert list_digests(session, subscriber_id=reader) == []


def test_a_store_whose_every_term_is_too_rare_or_too_common_still_fits_and_plans(
    factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    # A thousand titles that differ in one word each, one summary shared by all: with
    # scikit-learn's bounds every term is pruned ("After pruning, no terms remain").
    block = "GPU paper word{i} {i}\n\nAnn Author, Bob Writer 2026-06-14\n\nOne shared summary of them all.\n\nPDF\n"
    dump = tmp_path / "alike.txt"
    dump.write_text("\n".join(block.format(i=i) for i in range(1000)), encoding="utf-8")
    ingest_file(factory, dump, now=DAY1, rules=RULES)
    reader = _subscribe(factory, settings, "reader@example.org")
    library = (
        b"@article{a, title={GPU paper word1 1}, year={2026}}\n@article{b, title={GPU paper word2 2}, year={2026}}\n"
    )
    import_library(factory, reader, library, DAY1)
    report = refresh_models(factory, DAY1, rules=RULES)
    assert report.vocabulary_fitted and report.models == 1 and report.unfitted == 0
    assert len(plan(factory, settings, RULES, now=DAY1, all_due=True).planned) == 1


def test_texts_without_a_word_fit_no_vocabulary_and_plan_in_the_built_in_order(
    factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    dump = tmp_path / "symbols.txt"
    block = "!!! {i} ???\n\nAnn Author 2026-06-14\n\n... --- ...\n\nPDF\n"
    dump.write_text("\n".join(block.format(i="·" * (i + 1)) for i in range(30)), encoding="utf-8")
    ingest_file(factory, dump, now=DAY1, rules=RULES)
    reader = _subscribe(factory, settings, "reader@example.org")
    import_library(
        factory, reader, b"@article{a, title={!!!}, year={2026}}\n@article{b, title={???}, year={2026}}\n", DAY1
    )
    assert not refresh_models(factory, DAY1, rules=RULES).vocabulary_fitted
    assert len(plan(factory, settings, RULES, now=DAY1, all_due=True).planned) == 1
