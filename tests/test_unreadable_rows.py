"""A stored setting digestbot never writes costs that reader only, on every path: the
planner, the commands, the pages; a restore refuses it (bot.domain.stored)."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.domain import DigestKind, SubscriberStatus
from bot.domain.stored import CADENCES, read_settings, zone_exists
from bot.ingest.storing import ingest_file
from bot.plan import plan
from bot.plan.cadence import CHOICES
from bot.store.engine import transaction
from bot.store.subscribers import get_subscriber, list_subscribers
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save, sendable
from bot.tokens import make_token, signing_key
from bot.web import create_app
from tests.conftest import ROOT, SEEDS
from tests.helpers import Cli, Server, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)
# What a restored backup or a hand-made SQL change can put in a reader's row.
BAD = {
    "zone@example.org": "timezone = 'Mars/Olympus'",
    "hour@example.org": "send_hour = 99",
    "status@example.org": "status = 'evil'",
    "cadence@example.org": "cadence = 'hourly'",
    "backfill@example.org": "backfill = 'forever'",
    "filter@example.org": "filter = '((gpu'",
    "traversal@example.org": "timezone = '../../../../etc/passwd'",
    "threshold@example.org": "taste_threshold = 99",
}
GOOD = ("ada@example.org", "grace@example.org")


def _readers(factory: sessionmaker[Session], settings: object) -> None:
    everyone = [*GOOD, *BAD]
    save(factory, settings, [clean_fields(email, send_hour=0, filter="*") for email in everyone], NOW)  # type: ignore[arg-type]
    with transaction(factory) as session:
        for email, change in BAD.items():
            session.execute(text(f"UPDATE subscribers SET {change} WHERE email = :email"), {"email": email})


def test_the_built_in_cadences_are_the_ones_a_stored_row_may_hold() -> None:
    assert set(CHOICES) == CADENCES


@given(
    status=st.one_of(st.sampled_from([s.value for s in SubscriberStatus]), st.text(max_size=30), st.integers()),
    zone=st.one_of(st.sampled_from(["UTC", "Europe/Warsaw", "Factory", "localtime", "/etc/passwd"]), st.text()),
    hour=st.one_of(st.integers(-50, 200), st.text(max_size=5), st.none(), st.booleans()),
    cadence=st.one_of(st.sampled_from(sorted(CADENCES)), st.text(max_size=20)),
    backfill=st.one_of(st.sampled_from(["all", "7d", "0d"]), st.text(max_size=10)),
    threshold=st.one_of(st.floats(), st.integers(-10, 10), st.text(max_size=5)),
)
def test_any_stored_settings_read_as_usable_ones_and_a_fault_says_what_was_not(
    status: object, zone: object, hour: object, cadence: object, backfill: object, threshold: object
) -> None:
    read = read_settings(
        status=status, timezone=zone, send_hour=hour, cadence=cadence, backfill=backfill, taste_threshold=threshold
    )
    assert -5 <= read.taste_threshold <= 5
    assert isinstance(read.status, SubscriberStatus)
    assert zone_exists(read.timezone) and 0 <= read.send_hour <= 23 and read.cadence in CADENCES
    untouched = (read.status.value, read.timezone, read.send_hour, read.cadence, read.backfill) == (
        status,
        zone,
        hour,
        cadence,
        backfill,
    ) and read.taste_threshold == threshold
    assert (read.fault is None) == (untouched and not isinstance(hour, bool))
    assert read.fault is None or len(read.fault) < 600


def test_one_unreadable_reader_is_left_out_and_everyone_else_is_planned(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    settings = settings_for(tmp_path)
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, rules=RULES, now=NOW)
    _readers(factory, settings)
    report = plan(factory, settings, RULES, now=NOW, all_due=True)
    with factory() as session:
        planned = {
            email
            for (email,) in session.execute(
                text("SELECT s.email FROM digests d JOIN subscribers s ON s.id = d.subscriber_id")
            )
        }
    assert planned == set(GOOD)
    # The unknown status reads as paused, so it is never among the active readers planned.
    assert report.unreadable == len(BAD) - 1
    assert report.unreadable_first is not None
    with factory() as session:
        everyone = {s.email: s for s in list_subscribers(session)}
    assert {e for e, s in everyone.items() if s.fault is not None} == set(BAD) - {"filter@example.org"}
    assert everyone["status@example.org"].status is SubscriberStatus.PAUSED


def test_send_now_names_each_reader_once_and_says_why_one_is_held(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    settings = settings_for(tmp_path)
    _readers(factory, settings)
    with factory() as session:
        named = [get_subscriber(session, e) for e in ("ada@example.org", "ADA@example.org", "zone@example.org")]
        named += [get_subscriber(session, "ada@example.org"), get_subscriber(session, "filter@example.org")]
    chosen, refused = sendable([n for n in named if n is not None])
    assert [s.email for s in chosen] == ["ada@example.org"]
    assert len(refused) == 2 and "Mars/Olympus" in refused[0] and "filter" in refused[1]
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, rules=RULES, now=NOW)
    # The planner itself plans a reader named three times once.
    report = plan(factory, settings, RULES, now=NOW, subscribers=[named[0], named[1], named[3]], kind=DigestKind.MANUAL)  # type: ignore[list-item]
    assert len(report.planned) == 1


def test_the_commands_serve_the_rest_and_tell_of_the_held(tmp_path: Path) -> None:
    run = Cli(tmp_path)
    (tmp_path / "dumps").mkdir()
    for email in (*GOOD, *BAD):
        run("subscribers", "add", email, "--filter", "*", "--hour", "0")
    run("dumps", "ingest", *map(str, sorted(SEEDS.glob("*.txt"))))
    with sqlite3.connect(tmp_path / "cli.sqlite3") as connection:
        for email, change in BAD.items():
            connection.execute(f"UPDATE subscribers SET {change} WHERE email = ?", (email,))
    # Each call asserts that no traceback was printed.
    listed = run("subscribers", "list").stdout
    assert "active, held" in listed and "ada@example.org" in listed
    assert "Mars/Olympus" in run("subscribers", "show", "zone@example.org").stdout
    run("subscribers", "show", "status@example.org")
    run("subscribers", "pause", "hour@example.org")
    run("subscribers", "resume", "status@example.org")
    assert "ada@example.org" in run("subscribers", "export").stdout
    refused = run("send-now", "zone@example.org", "ADA@example.org", "ada@example.org", code=None)
    assert "zone@example.org cannot be planned" in refused.stderr and refused.returncode == 1
    assert "queued 1 digest" in refused.stdout
    run("run", "--once", "--all-due", code=None)
    run("history")
    run("preview", "zone@example.org")
    run("stats")
    run("stats", "--html", str(tmp_path / "report.html"))


def test_the_pages_of_a_reader_with_an_unknown_status_and_zone_answer_and_unsubscribe(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    settings = settings_for(tmp_path, site=True)
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, rules=RULES, now=NOW)
    save(factory, settings, [clean_fields("odd@example.org", send_hour=0, filter="*")], NOW)
    plan(factory, settings, RULES, now=NOW, all_due=True)
    with transaction(factory) as session:
        session.execute(text("UPDATE subscribers SET status = 'evil', timezone = 'Mars/Olympus'"))
        session.execute(text("UPDATE digests SET state = 'sent', sent_at = planned_at"))
        day = session.execute(text("SELECT local_date FROM digests")).scalar_one()
    with factory() as session:
        odd = get_subscriber(session, "odd@example.org")
    assert odd is not None
    token = make_token(signing_key(settings), odd.id, odd.unsubscribe_secret)
    with Server(create_app(settings, factory)) as client:
        for path in (f"/u/{token}", f"/m/{token}", f"/f/{token}.atom", f"/d/{token}/{day}"):
            assert client.get(path).status_code == 200, path
        one_click = client.post(
            f"/u/{token}",
            content=b"List-Unsubscribe=One-Click",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert one_click.status_code == 200 and "You are unsubscribed" in one_click.text
        deadline = time.monotonic() + 10
        while True:
            with factory() as session:
                found = get_subscriber(session, "odd@example.org")
            if found is not None and found.status is SubscriberStatus.UNSUBSCRIBED:
                break
            assert time.monotonic() < deadline, "the unsubscribe was not applied within 10 s"
            time.sleep(0.1)


@pytest.mark.parametrize("change", list(BAD.values()))
def test_a_restore_refuses_a_backup_with_a_setting_digestbot_never_writes(tmp_path: Path, change: str) -> None:
    run = Cli(tmp_path)
    run("subscribers", "add", "ada@example.org")
    run("subscribers", "add", "grace@example.org")
    run("db", "backup", str(tmp_path / "backup.sqlite3"))
    with sqlite3.connect(tmp_path / "backup.sqlite3") as connection:
        connection.execute(f"UPDATE subscribers SET {change} WHERE email = 'grace@example.org'")
    refused = run("db", "restore", str(tmp_path / "backup.sqlite3"), code=1)
    assert "is as it was" in refused.stderr and "subscriber 2" in refused.stderr
    assert "never writes" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert "grace@example.org" in run("subscribers", "list").stdout


def test_a_restore_refuses_a_backup_with_a_digest_state_digestbot_never_writes(tmp_path: Path) -> None:
    run = Cli(tmp_path)
    (tmp_path / "dumps").mkdir()
    run("subscribers", "add", "ada@example.org", "--filter", "*", "--hour", "0")
    run("dumps", "ingest", *map(str, sorted(SEEDS.glob("*.txt"))))
    run("run", "--once", "--all-due", code=None)
    run("db", "backup", str(tmp_path / "backup.sqlite3"))
    with sqlite3.connect(tmp_path / "backup.sqlite3") as connection:
        assert connection.execute("UPDATE digests SET state = 'evil'").rowcount >= 1
    refused = run("db", "restore", str(tmp_path / "backup.sqlite3"), code=1)
    assert "state 'evil' is not one digestbot writes" in refused.stderr
    run("history")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("INSERT INTO llm_usage (day, requests, tokens) VALUES ('2026-06-14', -5, 0)", "llm_usage row 2026-06-14"),
        ("INSERT INTO llm_usage (day, requests, tokens) VALUES ('2026-06-14', 3, -1)", "tokens '-1'"),
        ("INSERT INTO llm_usage (day, requests, tokens) VALUES ('2026-06-14', 'many', 0)", "requests 'many'"),
        ("INSERT INTO llm_usage (day, requests, tokens) VALUES ('2026-06-14', 2.5, 0)", "requests '2.5'"),
        ("UPDATE subscribers SET bounces = -3", "bounces '-3'"),
    ],
)
def test_a_restore_refuses_a_backup_with_an_impossible_count(tmp_path: Path, change: str, said: str) -> None:
    """A day's model usage of -5 requests was restored and shown ("-5 requests of 2,000 a
    day"), and would have given the day's budget five more: digestbot counts up from zero
    in whole numbers, so a backup holding anything else was changed."""
    run = Cli(tmp_path)
    run("subscribers", "add", "ada@example.org")
    run("db", "backup", str(tmp_path / "backup.sqlite3"))
    with sqlite3.connect(tmp_path / "backup.sqlite3") as connection:
        connection.execute(change)
    refused = run("db", "restore", str(tmp_path / "backup.sqlite3"), code=1)
    assert said in refused.stderr and "is not a count (a whole number); digestbot never writes" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1 and "is as it was" in refused.stderr
