"""Channels' cost (issue 75): a day of 1,000 channels (Discord, Slack, Mattermost,
Telegram and Matrix in turn) against the local server that speaks their APIs
(``tests/chat_servers.py``, a process): the planning pass beside the same pass for
1,000 readers, in one run, and the posting pass (parts, seconds, parts a second).

    .venv/bin/python bench/channels.py [--channels 1000]

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine  # noqa: E402
from sqlalchemy.orm import Session, sessionmaker  # noqa: E402

from bot.channels.channel_service import add_channel  # noqa: E402
from bot.channels.delivering import deliver_channels  # noqa: E402
from bot.choose.tagging import load_rules  # noqa: E402
from bot.domain import SubscriberFields  # noqa: E402
from bot.domain.channel_states import Service  # noqa: E402
from bot.ingest.storing import ingest_file  # noqa: E402
from bot.plan import plan  # noqa: E402
from bot.store.engine import make_engine, sessions, upgrade  # noqa: E402
from bot.subscribers.fields import clean_fields  # noqa: E402
from bot.subscribers.subscriptions import save  # noqa: E402
from tests.chat_servers import ChatServers, chat_servers  # noqa: E402
from tests.helpers import settings_for  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)
SERVICES = list(Service)


def _destination(chat: ChatServers, service: Service, n: int) -> str:
    return {
        Service.SLACK: f"{chat.url}/services/T{n}/B{n}/secret{n}",
        Service.DISCORD: f"{chat.url}/api/webhooks/{n}/secret{n}",
        Service.MATTERMOST: f"mmost://127.0.0.1:{chat.port}/secret{n}",
        Service.TELEGRAM: f"{chat.url}/bot{n}:secret?chat_id=-{n}",
        Service.MATRIX: f"matrix://secret{n}@127.0.0.1:{chat.port}/!room{n}:example.org",
    }[service]


def _store(folder: Path) -> tuple[Engine, sessionmaker[Session]]:
    engine = make_engine(f"sqlite:///{folder / 'store.sqlite3'}")
    upgrade(engine)
    return engine, sessions(engine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--channels", type=int, default=1000)
    args = parser.parse_args()
    rules = load_rules(ROOT / "config" / "tags.toml")
    seeds = sorted((ROOT / "seeds").glob("*.txt"))
    with tempfile.TemporaryDirectory() as tmp, chat_servers() as chat:
        folder = Path(tmp)
        settings = settings_for(folder, site=True, channels={"most_parts": 4})
        (folder / "readers").mkdir()
        readers_engine, readers = _store(folder / "readers")
        (folder / "rooms").mkdir()
        rooms_engine, rooms = _store(folder / "rooms")
        fields = SubscriberFields(email="", filter="*", backfill="all")
        save(readers, settings, [clean_fields(f"r{n}@example.org", backfill="all") for n in range(args.channels)],
             DAY - timedelta(days=1))  # fmt: skip
        for n in range(args.channels):
            service = SERVICES[n % len(SERVICES)]
            add_channel(rooms, settings, f"room{n}", _destination(chat, service, n), fields, DAY - timedelta(days=1),
                        service if service is not Service.MATRIX else None)  # fmt: skip
        for factory in (readers, rooms):
            for seed in seeds:
                ingest_file(factory, seed, now=DAY, rules=rules)
        started = time.perf_counter()
        plan(readers, settings, rules, now=DAY, all_due=True)
        readers_seconds = time.perf_counter() - started
        started = time.perf_counter()
        plan(rooms, settings, rules, now=DAY, all_due=True)
        rooms_seconds = time.perf_counter() - started
        started = time.perf_counter()
        report = deliver_channels(rooms, settings, b"k" * 32, lambda: DAY, worker="bench")
        posting = time.perf_counter() - started
        received = len(chat.received())
        readers_engine.dispose()
        rooms_engine.dispose()
    print(f"planning {args.channels:,} readers: {readers_seconds:.2f} s; {args.channels:,} channels: "
          f"{rooms_seconds:.2f} s (ratio {rooms_seconds / readers_seconds:.2f})")  # fmt: skip
    rate = report.parts / posting
    print(f"posting: {report.sent:,} digests sent, {report.parts:,} parts ({received:,} at the server), "
          f"{posting:.1f} s, {rate:.0f} parts/s, {report.unknown} unknown, {report.failed} failed")  # fmt: skip


if __name__ == "__main__":
    main()
