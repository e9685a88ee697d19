"""Crashes: 1,000 digests (10,000 under `make soak`) delivered by ``digestbot run``
(SQLite, the real CLI in a subprocess) to an SMTP server on 127.0.0.1 while the bot is
SIGKILLed at 5 random moments (20) and restarted.  No message reaches the server twice:
what was on the wire at a kill (the server may have it, no answer recorded) is unknown,
never sent again by itself; every other digest is sent.  A SIGTERM while sending stops
it cleanly: exit 0, nothing twice, nothing left on its way.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bot.choose.tagging import load_rules
from bot.ingest.storing import ingest_file
from bot.plan import plan
from bot.store.engine import make_engine, sessions, upgrade
from bot.store.schema import Digest
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Sink, SinkHandler
from tests.conftest import ROOT
from tests.helpers import DIGESTBOT, settings_for, sized

RULES = load_rules(ROOT / "config" / "tags.toml")
# Every kill still finds claimed batches in flight, and the SIGTERM a batch being sent.
DIGESTS = sized(1_000, 10_000)
KILLS = sized(5, 20)


def _states(factory) -> Counter[str]:
    with factory() as session:
        return Counter(dict(session.execute(select(Digest.state, func.count()).group_by(Digest.state)).all()))


def _wait_until(condition, timeout: float, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the bot exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _handles_sigterm(proc: subprocess.Popen[str]) -> bool:
    """Whether *proc* has set its SIGTERM handler: before that a SIGTERM kills it outright."""
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.slow
@pytest.mark.soak
def test_sigkill_while_sending_then_sigterm_sends_each_digest_once(tmp_path: Path, seed_files: list[Path]) -> None:
    database = tmp_path / "crash.sqlite3"
    engine = make_engine(f"sqlite:///{database}")
    upgrade(engine)
    factory = sessions(engine)
    now = datetime.now(UTC)
    settings = settings_for(tmp_path)
    save(
        factory, settings, [clean_fields(f"reader{i:05d}@example.org") for i in range(DIGESTS)], now - timedelta(days=1)
    )
    ingest_file(factory, seed_files[0], now=now, rules=RULES)
    assert len(plan(factory, settings, RULES, now=now, all_due=True).planned) == DIGESTS

    handler = SinkHandler()
    (tmp_path / "empty").mkdir()  # the dump folder `run` watches: nothing new arrives
    with Sink(handler) as sink:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
        env |= {
            "DIGESTBOT_DATABASE__URL": f"sqlite:///{database}",
            "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
            "DIGESTBOT_PATHS__DUMP_DIR": str(tmp_path / "empty"),
            "DIGESTBOT_SMTP__PORT": str(sink.port),
            "DIGESTBOT_SMTP__POOL_SIZE": "4",
            "DIGESTBOT_WATCH__INTERVAL_SECONDS": "3600",
        }

        def start() -> subprocess.Popen[str]:
            return subprocess.Popen(
                [DIGESTBOT, "run"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )

        def received() -> int:
            return len(handler.received)

        rng = random.Random(20261122)
        moments = sorted(rng.sample(range(DIGESTS // 50, DIGESTS * 9 // 10), KILLS))
        in_flight_at_kills = []
        for moment in moments:
            bot = start()
            _wait_until(lambda moment=moment: received() >= moment, timeout=600, proc=bot)
            bot.send_signal(signal.SIGKILL)
            bot.wait(10)
            # "sending" rows the dead process had claimed: the most it can have left unknown.
            in_flight_at_kills.append(_states(factory)["sending"])

        # A SIGTERM in the middle of sending: in-flight sends finish and are recorded, exit 0.
        bot = start()
        before = received()
        _wait_until(lambda: received() >= before + 200, timeout=600, proc=bot)
        bot.send_signal(signal.SIGTERM)
        _, errors = bot.communicate(timeout=60)
        assert bot.returncode == 0, errors
        assert _states(factory)["sending"] == 0  # nothing left half-done by a clean stop
        ids_before_restart = Counter(body.message_id for body in handler.bodies)

        bot = start()
        _wait_until(lambda: _states(factory)["sent"] + _states(factory)["unknown"] == DIGESTS, timeout=900, proc=bot)
        _wait_until(lambda: _handles_sigterm(bot), timeout=60, proc=bot)  # the SIGTERM phase may have sent the rest
        bot.send_signal(signal.SIGTERM)
        _, errors = bot.communicate(timeout=60)
        assert bot.returncode == 0, errors
        bodies = [body for body in handler.bodies if body.delivered]

    ids = Counter(body.message_id for body in bodies)
    states = _states(factory)
    with factory() as session:
        unknown = set(session.scalars(select(Digest.message_id).where(Digest.state == "unknown")))
        sent = set(session.scalars(select(Digest.message_id).where(Digest.state == "sent")))
    duplicates = len(bodies) - len(ids)
    print(
        f"\ncrash run: {DIGESTS} digests, {KILLS} SIGKILLs at {moments}; received {len(bodies)}, "
        f"distinct Message-IDs {len(ids)}, duplicates {duplicates}, unknown {len(unknown)} "
        f"({len(unknown & set(ids))} of them received), in flight at the kills {sum(in_flight_at_kills)} "
        f"({in_flight_at_kills})"
    )
    assert duplicates == 0
    assert set(states) <= {"sent", "unknown"} and states["unknown"] == len(unknown)
    assert states["sent"] + states["unknown"] == DIGESTS
    assert sent <= set(ids) and len(unknown) <= sum(in_flight_at_kills)
    assert set(ids) <= sent | unknown
    # After the SIGTERM nothing already received came again.
    after_sigterm = Counter(body.message_id for body in bodies[sum(ids_before_restart.values()) :])
    assert not set(after_sigterm) & set(ids_before_restart)
    engine.dispose()
