"""An outside ranker in a planning pass (bot.plan.challenger): digests interleaved and
pinned, the ranker asked with no lock held, and a ranker that fails changing nothing
but the order.  On SQLite and PostgreSQL, with the example ranker as a process."""

from __future__ import annotations

import html
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain.rankers import Interleaving
from bot.ingest.storing import ingest_bytes
from bot.mail.parts import Parts
from bot.plan import plan
from bot.plan.resend import resend
from bot.rankers.interleave import tallies
from bot.store.contents import digest_content
from bot.store.engine import sessions, transaction
from bot.store.interleaved import judged_since
from bot.store.schema import Digest, SubscriberRow
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.taste.library_service import give_feedback, import_library
from bot.web.versions import WebVersions
from tests.conftest import ROOT
from tests.helpers import Cli, digest_entry_ids, render_dump, settings_for
from tests.helpers import example_ranker as running_example_ranker

RULES = load_rules(ROOT / "config" / "tags.toml")
NOW = datetime(2026, 11, 23, 9, tzinfo=UTC)
TITLES = [
    "Graph databases and query planning",
    "Spiking neural networks with surrogate gradients",
    "A survey of protein folding",
    "Surrogate gradient learning in spiking networks",
    "Query optimisation for graph stores",
    "Weather forecasting with transformers",
]
LIBRARY = b"@article{a, title = {Training spiking neural networks}, abstract = {Spiking neurons, surrogate gradients.}}"


@pytest.fixture(scope="module")
def example_ranker() -> Iterator[str]:
    with running_example_ranker() as url:
        yield url


def _store(engine: Engine, tmp_path: Path, url: str, **ranker: object) -> tuple[sessionmaker[Session], Settings]:
    factory = sessions(engine)
    cfg = settings_for(tmp_path, web={"signing_key": "k" * 32}, ranker={"url": url, "name": "bm25", **ranker})
    people = [clean_fields(f"{who}@example.org", timezone="UTC", send_hour=8) for who in ("ada", "grace")]
    save(factory, cfg, people, NOW - timedelta(days=1))
    papers = [(title, ["A. Author"], NOW.date(), f"About {title.lower()}.") for title in TITLES]
    ingest_bytes(factory, render_dump(papers).encode(), name="day", now=NOW - timedelta(hours=2), rules=RULES)
    with factory() as session:
        ada = session.scalar(text("SELECT id FROM subscribers WHERE email = 'ada@example.org'"))
    import_library(factory, ada, LIBRARY, NOW - timedelta(hours=3))
    return factory, cfg


def _digests(factory: sessionmaker[Session]) -> dict[str, tuple[int, list[int], list[str | None], datetime]]:
    """Per reader: their digest, its entries in the order shown, the ranker that placed
    each (None: not interleaved) and when it may go; the order shown checked against
    what the reader's mail renders."""
    with factory() as session:
        rows = session.execute(
            select(Digest.id, SubscriberRow.email, Digest.next_attempt_at, Digest.interleaving).join(
                SubscriberRow, SubscriberRow.id == Digest.subscriber_id
            )
        ).all()
        keys = dict(session.execute(text("SELECT id, key FROM entries")).all())
        found = {}
        for digest_id, email, next_attempt, drafted in rows:
            body = digest_entry_ids(session, digest_id)
            pinned = Interleaving.from_text(drafted, len(body))
            order = pinned.order if pinned else range(len(body))
            placed = [pinned.placed_by(n) if pinned else None for n in order]
            shown = [body[n] for n in order]
            assert [item.key for item in digest_content(session, digest_id).items] == [keys[e] for e in shown]
            found[email.split("@")[0]] = (digest_id, shown, placed, next_attempt)
    return found


def test_a_readers_digest_is_interleaved_and_pinned_and_the_others_are_not(
    engine: Engine, tmp_path: Path, example_ranker: str
) -> None:
    factory, cfg = _store(engine, tmp_path, example_ranker)
    report = plan(factory, cfg, RULES, now=NOW)
    assert report.ranker_failure is None and (report.ranker_ranked, report.ranker_skipped) == (1, 0)
    digests = _digests(factory)
    _, ada_entries, ada_placed, ada_next = digests["ada"]
    _, grace_entries, grace_placed, grace_next = digests["grace"]
    assert set(ada_placed) == {"built-in", "bm25"}  # both rankers placed some; every item says which
    assert grace_placed == [None] * len(grace_entries)  # no library, no ratings: not asked about
    assert sorted(ada_entries) == sorted(grace_entries)  # the ranker reorders; it chooses nothing
    assert ada_next.replace(tzinfo=UTC) <= NOW and grace_next.replace(tzinfo=UTC) <= NOW  # none held back now
    with factory() as session:
        titles = dict(session.execute(text("SELECT id, title FROM entries")).all())
    first_two = {titles[e] for e in ada_entries[:2]}
    assert any("piking" in t for t in first_two)  # one ranker's first pick is hers, whichever leads


def test_a_hanging_ranker_keeps_the_built_in_order_and_holds_no_lock(engine: Engine, tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    asked = threading.Event()

    def hang() -> None:
        connection, _ = listener.accept()
        asked.set()
        time.sleep(5)
        connection.close()

    threading.Thread(target=hang, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    factory, cfg = _store(engine, tmp_path, url, answer_seconds=2.0)
    reports = []
    planner = threading.Thread(target=lambda: reports.append(plan(factory, cfg, RULES, now=NOW)))
    started = time.monotonic()
    planner.start()
    assert asked.wait(30)
    with factory() as session:  # while the ranker is asked: the store takes a write at once
        if engine.dialect.name == "sqlite":
            session.execute(text("PRAGMA busy_timeout = 200"))
        else:
            session.execute(text("SET lock_timeout = '200ms'"))
        session.execute(text("UPDATE subscribers SET timezone = 'UTC'"))  # the readers' rows too
        held = session.scalars(select(Digest.next_attempt_at)).all()
        session.commit()
    planner.join(30)
    listener.close()
    assert time.monotonic() - started < 10
    report = reports[0]
    assert report.ranker_failure is not None and "no whole answer within 2 s" in report.ranker_failure
    assert (report.ranker_ranked, report.ranker_skipped) == (0, 1)
    assert any(at.replace(tzinfo=UTC) > NOW + timedelta(seconds=100) for at in held)  # ada's, held while asked
    digests = _digests(factory)
    assert all(p is None for p in digests["ada"][2]) and digests["ada"][1] == digests["grace"][1]
    assert all(d[3].replace(tzinfo=UTC) <= NOW for d in digests.values())  # let go when the ranker failed


def test_the_report_credits_the_ranker_that_placed_each_rated_entry(
    engine: Engine, tmp_path: Path, example_ranker: str
) -> None:
    factory, cfg = _store(engine, tmp_path, example_ranker)
    plan(factory, cfg, RULES, now=NOW)
    _, entries, placed, _ = _digests(factory)["ada"]
    with transaction(factory) as session:
        session.execute(text("UPDATE digests SET state = 'sent', sent_at = :at"), {"at": NOW})
        ada = session.scalar(text("SELECT id FROM subscribers WHERE email = 'ada@example.org'"))
    theirs = next(e for e, p in zip(entries, placed, strict=True) if p == "bm25")
    ours = next(e for e, p in zip(entries, placed, strict=True) if p == "built-in")

    def judged() -> tuple[object, ...]:
        with factory() as session:
            (found,) = tallies(judged_since(session, NOW - timedelta(days=1)))
        return found.ranker, found.digests, found.wins, found.losses, found.ties

    assert judged() == ("bm25", 1, 0, 0, 1)  # no rating yet: a tie
    give_feedback(factory, ada, theirs, "more", NOW)
    assert judged() == ("bm25", 1, 1, 0, 0)
    give_feedback(factory, ada, ours, "more", NOW)
    assert judged() == ("bm25", 1, 0, 0, 1)  # one each
    give_feedback(factory, ada, theirs, "less", NOW)  # replaces the "more"
    assert judged() == ("bm25", 1, 0, 1, 0)
    if engine.dialect.name == "sqlite":
        cli = Cli(tmp_path, {"DIGESTBOT_DATABASE__URL": engine.url.render_as_string(hide_password=False)})
        (row,) = [json.loads(line) for line in cli("rankers", "report", "--json").stdout.splitlines()]
        verdict = "too few to judge: 1 of the 20 digests with a preference a verdict needs"  # issue 76, item 4
        assert row == {
            "ranker": "bm25",
            "digests": 1,
            "wins": 0,
            "losses": 1,
            "ties": 0,
            "p_value": 1.0,
            "verdict": verdict,
        }
        table = " ".join(cli("rankers", "report").stdout.split())
        assert "bm25" in table and "Rankers, last 28 days" in table and "too few to judge" in table
        assert "No interleaved digest" in cli("rankers", "report", "--days", "1").stdout


class _WaitingRanker(ThreadingHTTPServer):
    """A ranker that answers its first request only once the planner has written the
    next batch's digest (or after *patience*): it sees whether the planner went on
    with that batch while its answer was awaited."""

    factory: sessionmaker[Session]  # the store, set once it is made

    def __init__(self, patience: float) -> None:
        super().__init__(("127.0.0.1", 0), _WaitingHandler)
        self.patience = patience
        self.requests: list[int] = []  # digests in the store when each request came
        self.next_batch_seen: list[bool] = []  # whether the next batch's digest was written before it answered


class _WaitingHandler(BaseHTTPRequestHandler):
    server: _WaitingRanker

    def do_POST(self) -> None:
        asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ends = time.monotonic() + self.server.patience
        first = not self.server.requests
        self.server.requests.append(self._digests())
        while first and self._digests() < 2 and time.monotonic() < ends:
            time.sleep(0.05)
        self.server.next_batch_seen.append(self._digests() >= 2)
        readers = [
            {"id": r["id"], "scores": [{"entry": e, "score": -n} for n, e in enumerate(reversed(r["candidates"]))]}
            for r in asked["readers"]
        ]
        body = json.dumps({"protocol": asked["protocol"], "readers": readers}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _digests(self) -> int:
        with self.server.factory() as session:
            return session.scalar(text("SELECT COUNT(*) FROM digests")) or 0

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


def test_the_ranker_answers_about_one_batch_while_the_next_is_planned(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranker = _WaitingRanker(patience=20)
    factory, cfg = _store(engine, tmp_path, f"http://127.0.0.1:{ranker.server_address[1]}/", name="reverse")
    with factory() as session:
        grace = session.scalar(text("SELECT id FROM subscribers WHERE email = 'grace@example.org'"))
    import_library(factory, grace, LIBRARY, NOW - timedelta(hours=3))
    ranker.factory = factory
    threading.Thread(target=ranker.serve_forever, daemon=True).start()
    monkeypatch.setattr("bot.plan.planner.PLAN_BATCH", 1)  # ada, then grace, each a batch
    try:
        report = plan(factory, cfg, RULES, now=NOW)
    finally:
        ranker.shutdown()
        ranker.server_close()
    assert len(ranker.requests) == 2  # asked about ada once her batch was written, then about grace
    assert ranker.next_batch_seen[0]  # grace's batch was planned while ada's answer was awaited
    assert report.ranker_failure is None and (report.ranker_ranked, report.ranker_skipped) == (2, 0)
    for _, entries, placed, next_attempt in _digests(factory).values():
        assert set(placed) == {"built-in", "reverse"} and len(entries) == len(placed) >= 2
        assert next_attempt.replace(tzinfo=UTC) <= NOW  # each let go when its answer was applied


def test_a_resend_and_the_web_version_show_the_order_the_reader_was_sent(engine: Engine, tmp_path: Path) -> None:
    ranker = _WaitingRanker(patience=0)  # ranks each reader's candidates in reverse
    factory, cfg = _store(engine, tmp_path, f"http://127.0.0.1:{ranker.server_address[1]}/", name="reverse")
    threading.Thread(target=ranker.serve_forever, daemon=True).start()
    ranker.factory = factory
    try:
        plan(factory, cfg, RULES, now=NOW)
    finally:
        ranker.shutdown()
        ranker.server_close()
    digest_id, shown, placed, _ = _digests(factory)["ada"]
    with factory() as session:
        body = digest_entry_ids(session, digest_id)
        keys = dict(session.execute(text("SELECT id, key FROM entries")).all())
        titles = dict(session.execute(text("SELECT id, title FROM entries")).all())
    assert sorted(shown) == sorted(body) and shown[:2] != body[:2]  # the reversed ranking's first is the body's last
    assert set(placed) == {"built-in", "reverse"}
    with transaction(factory) as session:
        session.execute(text("UPDATE digests SET state = 'sent', sent_at = :at"), {"at": NOW})
    resent = resend(factory, cfg, digest_id, now=NOW + timedelta(hours=1))
    with factory() as session:
        assert [item.key for item in digest_content(session, resent).items] == [keys[e] for e in shown]
        ada = get_subscriber(session, "ada@example.org")
    assert ada is not None
    versions = WebVersions(Parts(cfg), factory)
    content = versions.content(ada, NOW.date())
    assert content is not None
    page = versions.page(content, "t" * 20, "f" * 20, {})
    at = [page.index(html.escape(titles[e])) for e in shown]
    assert at == sorted(at)  # the web version lists them in the order sent


PLAN_IN_PROCESS = """
import json, sys
from pathlib import Path
from datetime import datetime
from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.plan import plan
from bot.plan.resend import resend
from bot.store.engine import make_engine, sessions
settings = Settings.model_validate(json.loads(sys.argv[2]))
rules = load_rules(Path(sys.argv[3]))
plan(sessions(make_engine(sys.argv[1])), settings, rules, now=datetime.fromisoformat(sys.argv[4]))
"""


def test_a_planner_killed_while_the_ranker_is_asked_leaves_the_digests_to_go_in_the_built_in_order(
    engine: Engine, tmp_path: Path
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    asked = threading.Event()

    def hang() -> None:
        connection, _ = listener.accept()
        asked.set()
        time.sleep(10)
        connection.close()

    threading.Thread(target=hang, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    factory, cfg = _store(engine, tmp_path, url)
    settings = json.dumps(
        cfg.model_dump(mode="json", exclude={"web": {"signing_key"}}) | {"web": {"signing_key": "k" * 32}}
    )
    store_url = engine.url.render_as_string(hide_password=False)
    planner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PLAN_IN_PROCESS,
            store_url,
            settings,
            str(ROOT / "config" / "tags.toml"),
            NOW.isoformat(),
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert asked.wait(60), planner.communicate(timeout=60)[1] if planner.poll() is not None else "still running"
        planner.kill()
    finally:
        planner.wait(10)
        listener.close()
    digests = _digests(factory)
    ada_next = digests["ada"][3].replace(tzinfo=UTC)
    hold = timedelta(seconds=cfg.ranker.pass_seconds + 60)
    assert ada_next == NOW + hold  # held: the ranker may still have reordered it
    assert digests["grace"][3].replace(tzinfo=UTC) <= NOW  # not asked about: not held
    assert all(p is None for p in digests["ada"][2]) and digests["ada"][1] == digests["grace"][1]
    with factory() as session:  # what delivery takes once the hold is over: the built-in order
        due = session.scalars(select(Digest.id).where(Digest.next_attempt_at <= NOW + hold)).all()
    assert digests["ada"][0] in due


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("DIGESTBOT_RANKER__NAME", "built-in", "names the built-in ranking"),
        ("DIGESTBOT_RANKER__NAME", "Bm 25", "ranker.name"),
        ("DIGESTBOT_RANKER__URL", "ftp://ranker.example/", "http(s) URL"),
        ("DIGESTBOT_RANKER__URL", "http://ranker.example/\nx", "http(s) URL"),
    ],
)
def test_a_bad_ranker_setting_is_one_line_naming_it(tmp_path: Path, variable: str, value: str, says: str) -> None:
    failed = Cli(tmp_path, {variable: value})("stats", code=2)
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "ranker" in lines[0], failed.stderr


def test_the_example_ranker_logs_one_line_a_request() -> None:
    """It logged nothing: an operator could not tell it was asked at all."""
    import httpx

    from tests.helpers import EXAMPLE_RANKER

    process = subprocess.Popen(
        [sys.executable, str(EXAMPLE_RANKER), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        url = process.stdout.readline().split()[-1]
        reader = {"id": 1, "library": [], "ratings": [], "interests": [], "candidates": []}
        ask = {"protocol": "digestbot-ranker/1", "candidates": [], "readers": [reader]}
        assert httpx.post(url, json=ask, timeout=10).status_code == 200
        assert httpx.post(url, json={"protocol": "other"}, timeout=10).status_code == 400
        ranked, refused = process.stderr.readline(), process.stderr.readline()
    finally:
        process.terminate()
        process.wait(10)
    assert " ranked 1 readers, 0 entries in " in ranked and refused.endswith(
        "refused a request: not digestbot-ranker/1\n"
    )


def test_a_pass_the_outside_ranker_answered_says_how_many_readers_it_ranked() -> None:
    from bot.cli.deliveries import tell_ranker
    from bot.cli.output import err, out
    from bot.plan.report import PlanReport
    from tests.helpers import settings_for

    settings = settings_for(Path("/nonexistent"), ranker={"url": "http://127.0.0.1:9/rank"})
    with out.capture() as said, err.capture() as warned:
        tell_ranker(PlanReport(ranker_ranked=12), settings)
        tell_ranker(PlanReport(ranker_ranked=1), settings)
        tell_ranker(PlanReport(), settings)
    assert said.get() == (
        "the outside ranker ordered 12 readers' digests, interleaved with the built-in order\n"
        "the outside ranker ordered 1 reader's digest, interleaved with the built-in order\n"
    )
    assert warned.get() == ""
