"""A hostile SMTP server (aiosmtpd on 127.0.0.1 drawing faults at random rates):
every digest that can be delivered reaches the server exactly once (sent, or unknown
when the server dropped the connection or answered only after the wait), every
permanent refusal is failed, listed by ``history --status failed`` and its subscriber
suppressed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiosmtplib
import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now, due_count
from bot.domain import DigestKind, DigestState, SubscriberStatus
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.digests import list_digests
from bot.store.engine import make_engine, sessions, upgrade
from bot.store.subscribers import list_subscribers
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Fault, FaultRates, Sink, SinkHandler
from tests.conftest import ROOT
from tests.helpers import DIGESTBOT, settings_for, sized

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY1 = datetime(2026, 6, 14, 12, tzinfo=UTC)
# Enough that every fault is drawn several times (a few dead mailboxes and stalls).
SUBSCRIBERS = sized(300, 1000)
RATES = FaultRates(
    greeting_421=0.05, rcpt_4xx=0.10, data_4xx=0.10, permanent=0.02, drop=0.05, stall=0.01, stall_seconds=60, seed=7
)
MAX_ATTEMPTS = 10


def _settings(tmp_path: Path, port: int) -> Settings:
    return settings_for(
        tmp_path,
        smtp={
            "port": port,
            "timeout_seconds": 5,  # far above a loaded machine's slowest answer
            "final_reply_seconds": 10,  # far below a stall (60 s): such a reply comes after the wait
            "pool_size": 8,
            "max_attempts": MAX_ATTEMPTS,
            "retry_base_seconds": 60,
            "retry_max_seconds": 600,
        },
        sender={"from_address": "digest@bot.example", "from_name": "Research Digest"},
    )


def test_fault_rates_are_reproducible_and_near_their_targets() -> None:
    draws = [RATES(f"user{i}@example.org", 0) for i in range(20_000)]
    assert draws == [RATES(f"user{i}@example.org", 0) for i in range(20_000)]
    kinds = Counter(
        "ok"
        if f is None
        else "perm"
        if (f.reply or "").startswith("55")
        else "drop"
        if f.drop
        else "stall"
        if f.stall
        else "4xx"
        for f in draws
    )
    assert abs(kinds["perm"] / 20_000 - 0.02) < 0.005
    assert abs(kinds["4xx"] / 20_000 - 0.196) < 0.015  # 20 % of the 98 % that are not dead mailboxes
    assert abs(kinds["drop"] / 20_000 - 0.049) < 0.008
    assert 0.005 < kinds["stall"] / 20_000 < 0.015


def test_a_refused_greeting_is_a_421_the_client_sees() -> None:
    handler = SinkHandler(refuse_greeting=lambda n: n == 0)
    with Sink(handler) as sink:

        async def attempt() -> int:
            client = aiosmtplib.SMTP(hostname="127.0.0.1", port=sink.port, timeout=5)
            try:
                await client.connect()
            except aiosmtplib.SMTPConnectResponseError as exc:
                return exc.code
            await client.quit()
            return 220

        assert asyncio.run(attempt()) == 421
        assert asyncio.run(attempt()) == 220
    assert handler.refused_greetings == 1


def test_a_stalled_answer_the_client_waits_for_is_a_message_the_sink_kept() -> None:
    """The sink says 250 only for what it recorded: a slow "250" that reaches a client
    still listening is a delivery, and a stall the client gave up on keeps nothing."""
    handler = SinkHandler(faults=lambda rcpt, attempt: Fault("data", "250 late", stall=0.3 if attempt == 0 else 30))
    with Sink(handler) as sink:

        async def attempt(timeout: float) -> str:
            client = aiosmtplib.SMTP(hostname="127.0.0.1", port=sink.port, timeout=timeout)
            await client.connect()
            try:
                await client.sendmail("bot@example.org", ["ada@example.org"], b"Subject: hi\r\n\r\nbody\r\n")
            except aiosmtplib.SMTPTimeoutError:
                return "timed out"
            finally:
                client.close()
            return "sent"

        assert asyncio.run(attempt(5)) == "sent"
        assert asyncio.run(attempt(0.5)) == "timed out"
        received = len(sink.received)
    assert received == 1


@pytest.mark.slow
@pytest.mark.soak
def test_every_subscriber_through_a_hostile_server(tmp_path: Path, seed_files: list[Path]) -> None:
    database = tmp_path / "store.sqlite3"
    engine = make_engine(f"sqlite:///{database}")
    upgrade(engine)
    factory: sessionmaker[Session] = sessions(engine)
    handler = SinkHandler.with_rates(RATES)
    with Sink(handler) as sink:
        settings = _settings(tmp_path, sink.port)
        emails = [f"reader{i:04d}@example.org" for i in range(SUBSCRIBERS)]
        save(factory, settings, [clean_fields(e) for e in emails], DAY1 - timedelta(days=1))
        ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
        plan(factory, settings, RULES, now=DAY1, all_due=True)
        now = DAY1
        rounds = 0
        while due_count(factory, now + timedelta(days=1)) and rounds < MAX_ATTEMPTS:
            asyncio.run(deliver_now(factory, Parts(settings), clock=lambda now=now: now))
            now += timedelta(hours=1)  # past the longest backoff (retry_max_seconds 600)
            rounds += 1
        received = list(sink.received)

    dead = {e for e in emails if RATES.is_permanent(e)}
    alive = set(emails) - dead
    with factory() as session:
        digests = [d for d in list_digests(session) if d.kind is DigestKind.SCHEDULED]
        states = Counter(d.state for d in digests)
        failed = {d.subscriber_email for d in digests if d.state is DigestState.FAILED}
        unknown = {d.subscriber_email for d in digests if d.state is DigestState.UNKNOWN}
        bounced = {s.email for s in list_subscribers(session) if s.status is SubscriberStatus.BOUNCED}
    # What reached the server and was (or may have been) passed on: each reader's at most once.
    delivered = [body for body in handler.bodies if body.delivered]
    ids = Counter(body.message_id for body in delivered)
    recipients = Counter(body.recipient for body in delivered)
    print(
        f"\nfault run: {SUBSCRIBERS} subscribers, {len(dead)} dead mailboxes; delivered {len(delivered)} "
        f"(expected {len(alive)}: {len(received)} answered 250, {len(unknown)} unknown), distinct Message-IDs "
        f"{len(ids)}, duplicates {len(delivered) - len(ids)}, {handler.refused_greetings} greetings refused, "
        f"{sum(handler.attempts.values())} RCPT attempts, {rounds} rounds"
    )
    assert SUBSCRIBERS // 200 <= len(dead) <= SUBSCRIBERS // 25
    assert len(digests) == SUBSCRIBERS
    assert set(recipients) == alive and max(recipients.values()) == 1
    assert len(ids) == len(delivered) == len(alive)
    assert unknown and {b.recipient for b in delivered if b.fate in ("dropped", "late")} == unknown
    assert states == {
        DigestState.SENT: len(alive) - len(unknown),
        DigestState.UNKNOWN: len(unknown),
        DigestState.FAILED: len(dead),
    }
    assert failed == dead and bounced == dead
    assert handler.refused_greetings > 0
    assert rounds <= MAX_ATTEMPTS

    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env["DIGESTBOT_DATABASE__URL"] = f"sqlite:///{database}"
    listed = subprocess.run(
        [DIGESTBOT, "history", "--status", "failed", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    rows = [json.loads(line) for line in listed.splitlines()]
    assert {r["subscriber"] for r in rows} == dead
    assert all(str(r["smtp_code"]) in {"550", "553"} for r in rows)
    engine.dispose()
