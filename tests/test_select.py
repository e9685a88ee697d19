"""Select stage: who gets what, per day, for the seeds and the example subscribers."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.candidates import local_send_time
from bot.choose.select import select_for
from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import SubscriberStatus
from bot.ingest.storing import ingest_file
from bot.store.subscribers import get_subscriber, list_subscribers
from bot.subscribers.csv_io import import_csv
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from tests.conftest import ROOT
from tests.seed_facts import (
    AGING,
    EXPECTED,
)

RULES = load_rules(ROOT / "config" / "tags.toml")

# Written by reading the seed dumps against config/tags.toml, not by running the code:
#  - grace, "gpu and llm": an entry needs a GPU word (GPU, CUDA, ROCm, HIP, H800,
#    A100, MI250X, multi-/inter-GPU ...) and an LLM word (LLM, large language model,
#    LRM, KV cache ...) in its title/summary as it stands that day, or the header tags.
#    Day 1: ForeMoE ("64 GPUs", "MoE LLMs"), MiniMax ("GPU kernel", "LLM inference"),
#    Maestro ("LLM-Based", "GPU budgets"); Eidola and nomp have no LLM word.
#    Day 2: Software Aging ("GPU-Based LLM"); GF-DiT has "vLLM-Omni", not "LLM".
#    Day 3: LMCache (CUDA/ROCm; description "Your LLM ... KV Cache"), ReSET (CUDA; LRMs).
#    Day 4: the header adds GPU/LLM to four entries she already got.
#  - carver, "snn or fpga": only dump 002 speaks of spiking networks, FPGAs or
#    neuromorphic computing: SupraSNN, ReSCom (both), Non-Parametric ("neuromorphic").
#  - edsger, '"sparse attention" or "kv cache"': MiniMax (title) on day 1, LMCache
#    (description "KV Cache Layer") on day 3.


@pytest.fixture
def subscribed(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    text = (ROOT / "config" / "subscribers.example.csv").read_text(encoding="utf-8")
    report = import_csv(factory, Settings(), text, datetime.now(UTC) - timedelta(days=1))
    assert (report.created, report.errors) == (5, ())
    return factory


def test_each_example_subscriber_gets_exactly_the_expected_entries_per_day(
    subscribed: sessionmaker[Session], seed_files: list[Path]
) -> None:
    sent: dict[str, set[int]] = {email: set() for email in EXPECTED}
    for day, path in enumerate(seed_files):
        ingest_file(subscribed, path, rules=RULES)
        with subscribed() as session:
            for email, per_day in EXPECTED.items():
                subscriber = get_subscriber(session, email)
                assert subscriber is not None
                got = select_for(session, subscriber, RULES, as_of=datetime.now(UTC), exclude=sent[email])
                assert {c.entry.content.title for c in got} == per_day[day], (email, day + 1)
                sent[email] |= {c.entry.id for c in got}
    with subscribed() as session:
        statuses = {s.email: s.status for s in list_subscribers(session)}
    assert statuses["linus@bücher.example"] is SubscriberStatus.PAUSED


def test_digest_order_is_by_relevance_then_newer(subscribed: sessionmaker[Session], seed_files: list[Path]) -> None:
    for path in seed_files:
        ingest_file(subscribed, path, rules=RULES)
    with subscribed() as session:
        grace = get_subscriber(session, "grace@example.org")
        assert grace is not None
        ranked = select_for(session, grace, RULES, as_of=datetime.now(UTC))
    scores = [c.explanation.score for c in ranked]
    assert scores == sorted(scores, reverse=True)
    # "GPU-Based LLM" in its title: both atoms hit the title, so it leads.
    assert ranked[0].entry.content.title == AGING
    assert ranked[0].explanation.why().startswith("gpu: tag (header; rule: title, summary)")


# Dump 000 (5 entries) long ago, dump 001 (2 new) two days before subscribing.
@pytest.mark.parametrize(("backfill", "expected"), [("7d", 2), ("0d", 0), ("all", 7)])
def test_backfill_decides_what_a_new_subscriber_gets_first(
    factory: sessionmaker[Session], seed_files: list[Path], backfill: str, expected: int
) -> None:
    long_ago = datetime(2026, 1, 1, tzinfo=UTC)
    ingest_file(factory, seed_files[0], now=long_ago, rules=RULES)
    now = datetime.now(UTC)
    ingest_file(factory, seed_files[1], now=now - timedelta(days=2), rules=RULES)  # 2 new, 2 days ago
    save(factory, Settings(), [clean_fields("new@example.org", backfill=backfill)], now)
    with factory() as session:
        subscriber = get_subscriber(session, "new@example.org")
        assert subscriber is not None
        got = select_for(session, subscriber, RULES, as_of=now)
    assert len(got) == expected


def test_local_send_time_follows_the_zone_and_dst() -> None:
    from bot.domain import Subscriber

    def sub(zone: str) -> Subscriber:
        t = datetime(2026, 1, 1, tzinfo=UTC)
        return Subscriber(1, "a@b.c", "", "*", zone, 8, SubscriberStatus.ACTIVE, "7d", t, t)

    assert local_send_time(sub("Asia/Tokyo"), date(2026, 3, 7)) == datetime(2026, 3, 6, 23, tzinfo=UTC)
    assert local_send_time(sub("America/Los_Angeles"), date(2026, 3, 7)) == datetime(2026, 3, 7, 16, tzinfo=UTC)
    # US DST starts 2026-03-08: 08:00 PDT is 15:00 UTC.
    assert local_send_time(sub("America/Los_Angeles"), date(2026, 3, 9)) == datetime(2026, 3, 9, 15, tzinfo=UTC)


def test_verdicts_kept_between_passes_follow_changed_entries(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """The daemon keeps one ``SelectionCache`` from pass to pass: a verdict on an entry
    whose text or tags changed since is made again."""
    from sqlalchemy import update

    from bot.choose.select import SelectionCache
    from bot.ingest.storing import ingest_bytes
    from bot.store.schema import Entry
    from tests.helpers import render_dump

    first = datetime(2026, 3, 2, 8, tzinfo=UTC)
    papers = [("Plain title", ["A. Author"], date(2026, 3, 1), "Nothing of note here.")]
    ingest_bytes(factory, render_dump(papers).encode(), name="d", now=first, rules=RULES)
    kept = SelectionCache()
    with factory() as session:
        assert kept.ranked(session, '"neuromorphic chip"', None, first + timedelta(hours=1), RULES) == []
    with factory() as session, session.begin():
        session.execute(update(Entry).values(summary="A neuromorphic chip."))
    with factory() as session:
        found = kept.ranked(session, '"neuromorphic chip"', None, first + timedelta(hours=2), RULES)
        assert [c.entry.content.title for c in found] == ["Plain title"]
