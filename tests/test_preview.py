"""`preview --eml`: the next digest's message, made by the real planner and mailer in
a transaction that is rolled back: the bytes the sender then sends (but for Date and
Message-ID), and a store that holds exactly what it held before."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.mail.preview import next_message
from bot.plan import plan
from bot.plan.next_digest import day_table, next_day
from bot.store.schema import Base
from bot.store.subscribers import get_subscriber, list_subscribers
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Sink, SinkHandler
from bot.unsubscribes import journal_of
from tests.conftest import ROOT, SEEDS
from tests.helpers import settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
START = datetime(2026, 6, 14, 6, tzinfo=UTC)


def _everything(factory: sessionmaker[Session]) -> dict[str, list[tuple[object, ...]]]:
    with factory() as session:
        return {
            table.name: sorted(map(tuple, session.execute(select(table)).all()), key=repr)
            for table in Base.metadata.sorted_tables
        }


def _without_date_and_id(message: bytes) -> bytes:
    return re.sub(rb"^(Date|Message-ID): [^\r\n]*\r?\n", b"", message, flags=re.MULTILINE)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_for(tmp_path, web={"public_url": "https://digest.example.org", "signing_key": "k" * 32})


def test_the_preview_is_the_message_that_is_then_sent(factory: sessionmaker[Session], settings: Settings) -> None:
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, now=START, rules=RULES)
    people = [
        clean_fields("ada@example.org", name="Ada", filter="snn", timezone="Europe/Berlin", send_hour="8"),
        clean_fields("bob@example.org", filter="*", timezone="UTC", send_hour="9"),
        clean_fields("cy@example.org", filter="no-such-tag", timezone="UTC", send_hour="9"),
    ]
    save(factory, settings, people, START - timedelta(days=1))
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
        cy = get_subscriber(session, "cy@example.org")
    assert ada is not None and cy is not None
    before = _everything(factory)
    with factory() as session:
        day = next_day(session, ada, START)
    assert day == START.date()
    preview = next_message(factory, Parts(settings, rules=RULES), ada, day=day, now=START)
    assert preview is not None and preview.entries == 3
    assert next_message(factory, Parts(settings, rules=RULES), cy, day=day, now=START) is None  # nothing for them
    lines = {x.email: (x.entries, x.held_back) for x in day_table(factory, settings, RULES, [ada, cy], day, START)}
    assert lines == {"ada@example.org": (3, 0), "cy@example.org": (0, 0)}
    assert _everything(factory) == before  # nothing planned, written or claimed

    with factory() as session:
        everyone = list_subscribers(session)
    send_at = preview.send_at + timedelta(minutes=3)
    plan(factory, settings, RULES, now=send_at, subscribers=[s for s in everyone if s.email == "ada@example.org"])
    handler = SinkHandler()
    with Sink(handler) as sink:
        wire = settings.model_copy(update={"smtp": settings.smtp.model_copy(update={"port": sink.port})})
        asyncio.run(deliver_now(factory, Parts(wire), clock=lambda: send_at))
    (sent,) = handler.received
    assert _without_date_and_id(sent.data) == _without_date_and_id(preview.data)
    assert b"Date: " in preview.data and b"Message-ID: " in preview.data
    with factory() as session:
        assert next_day(session, ada, send_at) == day + timedelta(days=1)


def test_a_preview_neither_applies_nor_loses_a_pending_unsubscribe(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, now=START, rules=RULES)
    save(factory, settings, [clean_fields("ada@example.org", filter="snn")], START - timedelta(days=1))
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
    assert ada is not None
    journal = journal_of(factory)
    journal.append([ada.id], START)
    assert journal.pending_subscribers([ada.id]) == {ada.id}
    assert (
        next_message(factory, Parts(settings, rules=RULES), ada, day=START.date(), now=START) is None
    )  # as good as gone
    assert journal.pending_subscribers([ada.id]) == {ada.id}


@pytest.mark.parametrize(
    ("status", "why"),
    [
        ("remove", "nothing goes out: they unsubscribed"),
        ("pause", "nothing goes out: they are paused"),
    ],
)
def test_preview_of_a_reader_who_is_not_active_says_nothing_goes_out_and_why(
    tmp_path: Path, status: str, why: str
) -> None:
    """Issue 48, item 3: an unsubscribed reader's preview ended "these go out with
    tomorrow's digest at 05:00", and spoke to the operator as "you"."""
    from tests.helpers import Cli

    cli = Cli(tmp_path, {"DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var")})
    (tmp_path / "dumps").mkdir()
    cli("dumps", "ingest", str(SEEDS))
    cli("subscribers", "add", "ada@example.org", "--filter", "no-such-tag-anywhere")
    cli("subscribers", status, "ada@example.org")
    said = " ".join(cli("preview", "ada@example.org").stdout.split())
    assert why in said and "go out with" not in said and "go out at" not in said, said
    assert " you " not in f" {said} " and " your " not in f" {said} ", said
