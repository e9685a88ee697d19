"""Header and input injection: CR/LF and other control characters in names,
titles, tags, addresses, filters and the sender configuration are refused at
input or end up as harmless text; non-ASCII header values are encoded and
round-trip.  Messages are read back as an SMTP server received them.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from email import policy
from email.parser import BytesParser
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import ConfigError, load_settings
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_bytes
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.entry_reads import list_entries
from bot.subscribers.fields import SubscriberInputError, clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Sink
from tests.conftest import ROOT
from tests.helpers import settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)
BREAKS = ["\r\n", "\n", "\r", "\x00", "\x0b", "\x1b", "\x85", "\u2028", "\u2029"]
EXPECTED_HEADERS = {
    "subject",
    "from",
    "to",
    "date",
    "message-id",
    "list-id",
    "list-unsubscribe",
    "auto-submitted",
    "precedence",
    "content-type",
    "mime-version",
}


@pytest.mark.parametrize("brk", BREAKS)
@pytest.mark.parametrize("field", ["email", "name", "filter"])
def test_control_characters_in_subscriber_input_are_refused(field: str, brk: str) -> None:
    fields = {"email": "eve@example.org", "name": "Eve", "filter": "gpu"}
    fields[field] = fields[field] + brk + "Bcc: victim@example.org"
    with pytest.raises(SubscriberInputError) as info:
        clean_fields(fields["email"], name=fields["name"], filter=fields["filter"])
    message = str(info.value)
    assert message.startswith(f"{field}:") and "\n" not in message and "\r" not in message


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("sender", "from_name", "Digest\r\nBcc: victim@example.org"),
        ("sender", "from_address", "bot@example.org\r\nBcc: victim@example.org"),
        ("sender", "list_id", "digest.example.org>\nBcc: x"),
        ("sender", "unsubscribe_address", "a@b.org, victim@example.org"),
    ],
)
def test_line_breaks_in_the_sender_configuration_are_refused(
    tmp_path: Path, section: str, key: str, value: str
) -> None:
    config = tmp_path / "digestbot.toml"
    config.write_text(f"[{section}]\n{key} = {json.dumps(value)}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert f"{section}.{key}" in str(info.value) and "\n" not in str(info.value)


def hostile_feed() -> bytes:
    """A JSON Feed (JSON strings carry any control character XML would refuse)."""
    items = [
        {
            "id": f"evil-{i}",
            "title": f"Legit title {i}{brk}Bcc: victim@example.org",
            "url": f"https://ok.example/{i}",
            "content_text": "harmless",
            "tags": [f"gpu{brk}Bcc: victim@example.org", f"Zoë “tag” {i}"],
            "authors": [{"name": f"Mallory{brk}To: x@y.z"}],
            "date_published": "2026-06-14T08:00:00Z",
        }
        for i, brk in enumerate(BREAKS)
    ]
    return json.dumps({"version": "https://jsonfeed.org/version/1.1", "title": "evil", "items": items}).encode()


def test_hostile_feed_fields_become_one_line_text(factory: sessionmaker[Session]) -> None:
    assert ingest_bytes(factory, hostile_feed(), name="evil.json", now=DAY).new == len(BREAKS)
    with factory() as session:
        entries = list_entries(session)
    for entry in entries:
        for text in (entry.content.title, *entry.content.authors, *entry.tags):
            assert not any(brk in text for brk in BREAKS), repr(text)
        assert entry.content.title.endswith("Bcc: victim@example.org")  # kept as text, on one line


def test_received_headers_are_exactly_ours_and_encoded(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    settings = settings_for(
        tmp_path,
        smtp={"port": sink.port, "timeout_seconds": 10},
        sender={"from_address": "digest@bot.example", "from_name": "Résumé “Digest”, Lab"},
    )
    save(factory, settings, [clean_fields("zoe@exämple.org", name="Zoë O'Brien, “PhD” <ok>")], DAY - timedelta(days=1))
    ingest_bytes(factory, hostile_feed(), name="evil.json", now=DAY, rules=RULES)
    plan(factory, settings, RULES, now=DAY, all_due=True)
    assert asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY)).sent == 1
    raw = sink.received[0].data
    head = raw.split(b"\r\n\r\n", 1)[0]
    assert head.isascii()  # everything non-ASCII is RFC 2047 / SMTPUTF8-free encoded
    assert b"\r\nBcc" not in raw and b"\nTo: x@y.z" not in raw
    message = BytesParser(policy=policy.default).parsebytes(raw)
    assert {name.lower() for name in message.keys()} <= EXPECTED_HEADERS | {"list-unsubscribe-post"}
    assert message.get_all("To") is not None and len(message.get_all("To")) == 1
    (to,) = message["To"].addresses
    assert (to.display_name, to.username, to.domain) == ("Zoë O'Brien, “PhD” <ok>", "zoe", "xn--exmple-cua.org")
    assert message["From"].addresses[0].display_name == "Résumé “Digest”, Lab"
    subject = str(message["Subject"])
    assert subject.startswith(f"{len(BREAKS)} new entries: ") and "\n" not in subject and "\r" not in subject
    assert sink.received[0].recipients == ["zoe@xn--exmple-cua.org"]


def test_a_non_ascii_local_part_is_refused_with_the_reason() -> None:
    with pytest.raises(SubscriberInputError, match=r"^email: 'zoë@example.org': .*"):
        clean_fields("zoë@example.org")
