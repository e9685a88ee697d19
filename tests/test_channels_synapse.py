"""A channel's digest posted to a real Matrix room: Synapse (from PyPI, on SQLite) as a
process, a user and a room; the digest read back through the client API; and a
connection dropped after a PUT reached the homeserver, whose retry, with the same
transaction id, makes no second event."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.channels.channel_service import add_channel
from bot.channels.delivering import deliver_channels
from bot.choose.tagging import load_rules
from bot.domain import SubscriberFields
from bot.ingest.storing import ingest_file
from bot.plan import plan
from bot.store.schema import Digest
from tests.conftest import ROOT
from tests.helpers import settings_for
from tests.synapse_server import DroppingProxy, Homeserver, synapse, synapse_python

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        synapse_python() is None,
        reason="no Synapse: make test installs it into .venv/synapse (or set DIGESTBOT_TEST_SYNAPSE to its Python)",
    ),
]
RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)


@pytest.fixture(scope="module")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    with synapse(tmp_path_factory.mktemp("synapse")) as running:
        yield running


def test_a_digest_reaches_a_matrix_room_once_though_an_answer_was_lost(
    factory: sessionmaker[Session], tmp_path: Path, homeserver: Homeserver, seed_files: list[Path]
) -> None:
    proxy = DroppingProxy(homeserver.url)
    settings = settings_for(tmp_path, site=True, channels={"answer_seconds": 20, "retry_base_seconds": 1})
    before = len(homeserver.events())
    destination = f"matrix://{homeserver.token}@127.0.0.1:{proxy.server_address[1]}/{homeserver.room}"
    fields = SubscriberFields(email="", filter="*", backfill="all")
    add_channel(factory, settings, "lab", destination, fields, DAY - timedelta(days=1))
    for seed in seed_files:
        ingest_file(factory, seed, now=DAY, rules=RULES)
    plan(factory, settings, RULES, now=DAY, all_due=True)
    proxy.drop_next_put = True
    deliver_channels(factory, settings, b"k" * 32, lambda: DAY, worker="w1")
    with factory() as session:
        assert session.scalars(select(Digest.state)).one() == "retry_wait"
    deliver_channels(factory, settings, b"k" * 32, lambda: DAY + timedelta(minutes=5), worker="w1")
    with factory() as session:
        assert session.scalars(select(Digest.state)).one() == "sent"
    events = homeserver.events()[before:]
    assert proxy.dropped == 1
    bodies = [event["content"]["body"] for event in events]
    assert len(bodies) == len(set(bodies)) >= 1  # one event a part: the lost answer's retry made none
    first = events[0]["content"]
    assert first["format"] == "org.matrix.custom.html" and '<a href="https://' in first["formatted_body"]
    assert first["m.mentions"] == {}
