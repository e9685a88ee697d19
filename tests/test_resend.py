"""`resend --failed` sends each failed digest at most once: a delivered resend ends
its original's failure (in `stats` too), a failed resend is never resent itself,
and a resend on its way is never doubled."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.delivery.loop import deliver_now
from bot.domain import DigestKind, DigestState
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.plan import ResendPending, plan, resend, resend_all
from bot.store.digests import list_digests, stats_by_day
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Fault, Sink, SinkHandler
from tests.conftest import ROOT
from tests.helpers import settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)


def test_resend_failed_twice_sends_each_failed_digest_once(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    handler = SinkHandler()
    refuse = {"on": True}
    handler.faults = lambda rcpt, attempt: Fault("data", "554 5.6.0 rejected") if refuse["on"] else None
    with Sink(handler) as sink:
        settings = settings_for(tmp_path, smtp={"port": sink.port, "timeout_seconds": 5, "max_attempts": 1})
        save(
            factory, settings, [clean_fields(f"{n}@example.org") for n in ("ada", "bob", "cy")], DAY - timedelta(days=1)
        )
        ingest_file(factory, seed_files[0], now=DAY, rules=RULES)
        plan(factory, settings, RULES, now=DAY, all_due=True)

        def deliver(at: datetime) -> None:
            asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: at))

        deliver(DAY)
        with factory() as session:
            assert len(list_digests(session, state=DigestState.FAILED)) == 3

        # Still refused: three resends fail; the next run resends the originals, not the failed resends.
        assert len(resend_all(factory, settings, DigestState.FAILED, now=DAY)) == 3
        deliver(DAY)
        refuse["on"] = False
        later = DAY + timedelta(hours=1)
        queued = resend_all(factory, settings, DigestState.FAILED, now=later)
        assert len(queued) == 3
        with factory() as session:
            originals = {d.id for d in list_digests(session) if d.kind is not DigestKind.RESEND}
            assert {d.resend_of for d in list_digests(session) if d.id in queued} == originals
        assert (
            resend_all(factory, settings, DigestState.FAILED, now=later) == []
        )  # queued, not yet sent: nothing doubled
        deliver(later)
        assert resend_all(factory, settings, DigestState.FAILED, now=later) == []  # delivered: nothing to resend
        assert len(sink.received) == 3
        assert sorted(r.recipients[0] for r in sink.received) == [
            "ada@example.org",
            "bob@example.org",
            "cy@example.org",
        ]

    with factory() as session:
        ((_, day),) = stats_by_day(session)
        history = list_digests(session)
    assert day.get("failed", 0) == 0 and day["sent"] == 3 and day["resent"] == 3
    assert sum(d.kind is DigestKind.RESEND for d in history) == 6  # the history keeps every attempt
    assert all(d.resend_of in originals for d in history if d.kind is DigestKind.RESEND)


def test_a_resend_on_its_way_is_not_doubled(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    settings = settings_for(tmp_path)
    save(factory, settings, [clean_fields("ada@example.org")], DAY - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY, rules=RULES)
    (digest,) = plan(factory, settings, RULES, now=DAY, all_due=True).planned
    first = resend(factory, settings, digest, now=DAY)
    with pytest.raises(ResendPending, match=f"#{first}"):
        resend(factory, settings, digest, now=DAY)
    with pytest.raises(ResendPending):
        resend(factory, settings, first, now=DAY)  # a resend of the resend is one of the original


def test_an_unknown_digest_is_shown_counted_and_resent_only_when_asked(tmp_path: Path, sink, handler) -> None:
    """A message the relay took whole and never answered (the connection dropped after
    its body) is unknown: `run --once` warns and exits 1, `history` and `stats` show it
    and say what it means, nothing sends it again by itself, and `resend --unknown` says
    what it is about to do before it sends a copy marked as a resend."""
    from tests.conftest import SEEDS
    from tests.helpers import Cli

    handler.faults = lambda recipient, attempt: (
        Fault("data", drop=True) if recipient == "ada@example.org" and attempt == 0 else None
    )
    (tmp_path / "dumps").mkdir()
    env = {
        "DIGESTBOT_SMTP__PORT": str(sink.port),
        "DIGESTBOT_PATHS__TEMPLATES_DIR": str(ROOT / "templates"),
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
    }
    cli = Cli(tmp_path, env, columns=120)
    cli("dumps", "ingest", *sorted(str(p) for p in SEEDS.glob("*.txt")))
    cli("subscribers", "import", str(ROOT / "config" / "subscribers.example.csv"))
    first = cli("run", "--once", "--all-due", code=1)
    assert ", unknown 1" in first.stdout and "history --status unknown" in first.stderr
    again = cli("run", "--once", code=0)  # nothing sends it again by itself
    assert "sent 0," in again.stdout and [b.recipient for b in handler.bodies].count("ada@example.org") == 1
    listed = [json.loads(line) for line in cli("history", "--status", "unknown", "--json").stdout.splitlines()]
    assert [(row["subscriber"], row["state"]) for row in listed] == [("ada@example.org", "unknown")]
    assert "no reply to the final dot" in listed[0]["error"]
    assert listed[0]["story"].endswith("went on the wire, no answer seen (unknown)")
    assert "the reader may have it" in " ".join(cli("history", "ada@example.org").stdout.split())
    stats = cli("stats", "--json").stdout
    assert sum(json.loads(line)["unknown"] for line in stats.splitlines()) == 1
    assert "the reader may have it" in " ".join(cli("stats").stdout.split())
    resent = cli("resend", "--unknown")
    said = " ".join(resent.stdout.split())
    assert "their readers may have them already" in said and "queued 1 resend" in said
    assert [b.recipient for b in handler.bodies].count("ada@example.org") == 2  # the copy, asked for
    counted = [json.loads(line) for line in cli("stats", "--json").stdout.splitlines()]
    assert sum(row["unknown"] for row in counted) == 0 and sum(row["resent"] for row in counted) == 1
    assert cli("resend", "--unknown").stdout.startswith("digests whose outcome is unknown")  # nothing left
