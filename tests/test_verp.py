"""The VERP return path: each digest's envelope sender names it, signed; off by default."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.mail.verp import digest_of, return_path
from bot.plan import plan
from bot.store.schema import Digest
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Sink
from tests.conftest import ROOT

KEY = b"v" * 32
BASE = "bounces@bot.example"
RULES = load_rules(ROOT / "config" / "tags.toml")
NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)


@given(st.integers(0, 10**18 - 1))
def test_a_return_path_names_its_digest_and_nothing_else_does(digest_id: int) -> None:
    address = return_path(KEY, BASE, digest_id)
    local = address.split("@")[0]
    assert address.startswith(f"bounces+d{digest_id}.") and address.endswith("@bot.example") and len(local) <= 64
    assert digest_of(KEY, BASE, address) == digest_id
    assert digest_of(KEY, BASE, f"<{address.upper()}>") == digest_id  # servers that change case
    assert digest_of(b"w" * 32, BASE, address) is None  # another key
    assert digest_of(KEY, BASE, address.replace(f"+d{digest_id}.", f"+d{digest_id + 1}.")) is None
    assert digest_of(KEY, BASE, address.replace("@bot.example", "@evil.example")) is None
    assert digest_of(KEY, "returns@bot.example", address) is None


@given(st.text(max_size=120))
def test_any_address_is_read_without_error(address: str) -> None:
    assert digest_of(KEY, BASE, address) is None or "+d" in address.lower()


def test_the_setting_is_checked() -> None:
    for bad in ("bounces+x@bot.example", "bounces", "@bot.example", "bounces@", "a b@bot.example", "b@x=?q?"):
        with pytest.raises(ValidationError):
            Settings.model_validate({"sender": {"bounce_address": bad}})


def test_each_digest_goes_out_with_its_own_return_path(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path], sink: Sink
) -> None:
    base = {
        "paths": {"var_dir": str(tmp_path / "var"), "templates_dir": str(ROOT / "templates")},
        "sender": {"from_address": "digest@bot.example"},
        "web": {"signing_key": KEY.decode()},
        "smtp": {"port": sink.port},
    }
    settings = Settings.model_validate({**base, "sender": {**base["sender"], "bounce_address": BASE}})
    save(factory, settings, [clean_fields(f"r{n}@example.org") for n in range(3)], NOW - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=NOW, rules=RULES)
    plan(factory, settings, RULES, now=NOW, all_due=True)
    assert asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: NOW)).sent == 3
    with factory() as session:
        digest_by_subscriber_email = {
            f"r{n}@example.org": d
            for n, d in enumerate(session.scalars(select(Digest.id).order_by(Digest.subscriber_id)))
        }
    for received in sink.received:
        (to,) = received.recipients
        assert digest_of(KEY, BASE, received.sender) == digest_by_subscriber_email[to]
        assert received.message["From"].addresses[0].addr_spec == "digest@bot.example"  # the header is unchanged
    plain = Settings.model_validate(base)
    save(factory, plain, [clean_fields("z@example.org")], NOW)
    plan(factory, plain, RULES, now=NOW + timedelta(days=1), all_due=True)
    asyncio.run(deliver_now(factory, Parts(plain), clock=lambda: NOW + timedelta(days=1)))
    assert sink.received[-1].sender == "digest@bot.example"  # off: the from address, as before
