"""The fault harness's channels (``bench/chaos.py``): three chat rooms (Discord, Slack,
Matrix) beside the readers, on the local server that speaks each service's API
(``tests/chat_servers.py``), which answers some posts in its hostile ways (taken and
never answered, taken and the connection dropped, 429 with a Retry-After, 503, 500);
then the promises counted at that server: each part posted at most once except where
its digest is marked unknown, and every room served or its digest unknown or failed
for a reason a fault gives."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from tests.chat_servers import ChatServers

ROOMS = {"room-d": "discord", "room-s": "slack", "room-m": "matrix"}
SECRET = "ChaosWebhookSecret"
# What the server does to a post, and whether the post may then be unknown.
FAULTS: tuple[tuple[str, dict[str, Any], bool], ...] = (
    ("accept_then_hang", {}, True),
    ("accept_then_drop", {}, True),
    ("status", {"status": 429, "retry_after": 2}, False),
    ("status", {"status": 503}, False),
    ("status", {"status": 500}, True),
)
SETTINGS = {
    "CHANNELS__ANSWER_SECONDS": "3",
    "CHANNELS__RETRY_BASE_SECONDS": "1",
    "CHANNELS__RETRY_MAX_SECONDS": "3",
    "CHANNELS__ATTEMPTS": "12",
    "CHANNELS__LEASE_SECONDS": "10",
}


def destination(chat: ChatServers, service: str) -> str:
    if service == "discord":
        return f"{chat.url}/api/webhooks/77/{SECRET}"
    if service == "slack":
        return f"{chat.url}/services/T1/B1/{SECRET}"
    return f"matrix://{SECRET}@127.0.0.1:{chat.port}/!chaos:example.org"


def add_rooms(chat: ChatServers, folder: Path, cli: Callable[..., str]) -> None:
    for name, service in ROOMS.items():
        path = folder / f"{name}.url"
        path.write_text(destination(chat, service))
        cli("channels", "add", name, "--destination-file", str(path), "--service", service,
            "--hour", "0", "--tz", "UTC", "--backfill", "all")  # fmt: skip


def queue_faults(chat: ChatServers, rng: random.Random, count: int = 4) -> list[str]:
    """*count* faults the server plays on the next posts: their names."""
    chosen = [rng.choice(FAULTS) for _ in range(count)]
    for mode, values, _ in chosen:
        chat.control(mode, **values)
    return [mode if mode != "status" else str(values["status"]) for mode, values, _ in chosen]


def check_rooms(url: str, chat: ChatServers, faults: list[str], process_faults: int) -> tuple[str, list[str]]:
    """One line of what the rooms got, and the promises broken."""
    engine = create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT c.name, d.state FROM digests d JOIN channels c ON c.subscriber_id = d.subscriber_id "
                "WHERE d.kind = 'scheduled'"
            )
        ).all()
        parts = Counter(state for (state,) in connection.execute(text("SELECT state FROM channel_parts")).all())
    engine.dispose()
    states = {name: state for name, state in rows}
    received = chat.received()
    by_room = {name: [r for r in received if r["service"] == service] for name, service in ROOMS.items()}
    problems = []
    for name, posts in by_room.items():
        texts = Counter(_text(post["payload"]) for post in posts)
        twice = sum(n - 1 for n in texts.values() if n > 1)
        if twice and states.get(name) != "unknown":
            problems.append(f"channel {name} got a part {twice + 1} times, its digest not unknown")
        if not posts and states.get(name) not in ("unknown", "failed"):
            problems.append(f"channel {name} got nothing (digest {states.get(name, 'never planned')})")
    maybe = sum(1 for fault in faults if fault in ("accept_then_hang", "accept_then_drop", "500"))
    unknown = sum(1 for state in states.values() if state == "unknown")
    if unknown > maybe + process_faults:
        problems.append(f"{unknown} channel digests unknown, more than the {maybe + process_faults} faults allow")
    line = (
        f"channels: {len(ROOMS)} rooms, {len(received)} parts posted, "
        + ", ".join(f"{name} {states.get(name, '-')}" for name in ROOMS)
        + f"; parts {dict(sorted(parts.items()))}; chat faults: {', '.join(faults) or 'none'}"
    )
    return line, problems


def _text(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True)
