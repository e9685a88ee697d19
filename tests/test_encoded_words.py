"""RFC 2047 encoded words cannot inject headers or MIME parts.

Python's ``email`` package decodes encoded words in the header values it is
given and writes a decoded CR LF back out raw.  Whatever a tag, a subject or a
display name decodes to (q and b encodings, other charsets, words split in two,
words that decode to further words, NEL, U+2028, bare CR, very long values), the
serialized message parsed back has exactly our headers, one To, and the
``multipart/alternative`` tree with text then HTML.
"""

from __future__ import annotations

import asyncio
import base64
import json
import quopri
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import ConfigError, Settings, load_settings
from bot.delivery.loop import deliver_now
from bot.domain import RenderedDigest
from bot.domain.text import CONTROL_CHARACTERS, header_text
from bot.ingest.storing import ingest_bytes
from bot.mail.header_lines import to_line
from bot.mail.message import Headers, build_message, display_name
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.entry_reads import list_entries
from bot.subscribers.fields import SubscriberInputError, clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Sink, SinkHandler
from tests.conftest import ROOT
from tests.helpers import settings_for

DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)
SENDER = Settings().sender
EXPECTED = [
    "Subject",
    "From",
    "To",
    "Date",
    "Message-ID",
    "List-Id",
    "List-Unsubscribe",
    "Auto-Submitted",
    "MIME-Version",
    "Content-Type",
]
INJECTIONS = [
    "\r\nBcc: evil@x.example",
    "\nX-Injected: 1",
    "\rReply-To: attacker@evil.example",
    "\r\nContent-Type: text/html\r\n\r\n<h1>Your account is locked</h1>",
    "\x85Cc: a@b.c",
    "\u2028To: x@y.z",
    "\r\n\r\n--=_digestbot_alternative\r\n",
    "\x00",
    "\t",
]
CHARSETS = ["utf-8", "UTF-8", "iso-8859-1", "us-ascii", "utf-16", "windows-1252", "bogus-charset", "utf-8*en"]


def q_word(text: str, charset: str = "utf-8") -> str:
    data = text.encode("utf-8" if charset.lower().startswith(("utf-8", "bogus")) else charset, "replace")
    body = quopri.encodestring(data, header=True).decode("ascii").replace("=\n", "")
    body = "".join(f"={ord(c):02X}" if c in "?\r\n\t " else c for c in body)
    return f"=?{charset}?q?{body}?="


def b_word(text: str, charset: str = "utf-8") -> str:
    data = text.encode("utf-8" if charset.lower().startswith(("utf-8", "bogus")) else charset, "replace")
    return f"=?{charset}?b?{base64.b64encode(data).decode('ascii')}?="


@st.composite
def encoded(draw: st.DrawFn) -> str:
    """A value made of plain text and encoded words, some of them nested or split in two."""
    pieces = []
    for _ in range(draw(st.integers(1, 4))):
        text = draw(st.sampled_from(INJECTIONS)) + draw(st.text(max_size=12))
        charset = draw(st.sampled_from(CHARSETS))
        kind = draw(st.sampled_from(["q", "b", "split", "nested", "plain"]))
        if kind == "q":
            pieces.append(q_word(text, charset))
        elif kind == "b":
            pieces.append(b_word(text, charset))
        elif kind == "split":  # one break in two adjacent words: "x\r" + "\nBcc..."
            cut = draw(st.integers(0, len(text)))
            pieces.append(q_word(text[:cut]) + draw(st.sampled_from(["", " ", "\t"])) + b_word(text[cut:]))
        elif kind == "nested":
            pieces.append(q_word(q_word(text)))
        else:
            pieces.append(text)
    value = draw(st.sampled_from(["", " "])).join(pieces)
    if draw(st.booleans()):
        value = value * draw(st.integers(1, 40))  # long values, folded or not
    return value


def squeezed(text: str) -> str:
    return "".join(text.split())


def headers_for(name: str) -> Headers:
    return Headers(
        to_name=name,
        to_address="ada@example.org",
        message_id="<digest.1.abc@localhost>",
        date=DAY,
        list_unsubscribe=("mailto:digestbot@localhost?subject=unsubscribe",),
    )


def assert_clean(raw: bytes, expected: list[str]) -> None:
    parsed = message_from_bytes(raw, policy=policy.default)
    assert [name for name, _ in parsed.raw_items()] == expected
    assert len(parsed.get_all("To")) == 1 and len(parsed["To"].addresses) == 1
    assert parsed["To"].addresses[0].addr_spec == "ada@example.org"
    for name, value in parsed.items():
        assert not CONTROL_CHARACTERS.search(str(value)), (name, str(value))
    assert parsed.get_content_type() == "multipart/alternative"
    assert [part.get_content_type() for part in parsed.iter_parts()] == ["text/plain", "text/html"]
    assert parsed.get_body(("plain",)).get_content().rstrip() == "text"
    assert parsed.get_body(("html",)).get_content().rstrip() == "<p>html</p>"


@given(subject=encoded(), name=encoded())
def test_no_value_becomes_a_header_or_a_part(subject: str, name: str) -> None:
    rendered = RenderedDigest(subject=subject, text="text\n", html="<p>html</p>\n")
    raw = build_message(rendered, headers_for(name), SENDER).as_bytes()
    assert_clean(raw, EXPECTED)
    parsed = message_from_bytes(raw, policy=policy.default)
    # Python's folder can put the space between two encoded words of a long non-ASCII
    # value outside them, where decoders drop it: a display defect, not an injection.
    assert squeezed(str(parsed["Subject"])) == squeezed(header_text(subject))
    assert squeezed(parsed["To"].addresses[0].display_name) == squeezed(display_name(name))


@given(name=encoded())
def test_the_spliced_to_line_is_the_simple_paths(name: str) -> None:
    rendered = RenderedDigest(subject="s", text="text\n", html="<p>html</p>\n")
    raw = build_message(rendered, headers_for(name), SENDER).as_bytes()
    line = next(field for field in raw.split(b"\r\n\r\n", 1)[0].split(b"\r\nTo: ")[1:2])
    assert to_line(name, "ada@example.org") == b"To: " + line.split(b"\r\nDate:")[0] + b"\r\n"


@pytest.mark.parametrize(
    "value",
    [
        "=?utf-8?q?x=0D=0ABcc:_evil@x.example=0D=0AX-Injected:_1?=",
        "=?utf-8?b?eQ0KUmVwbHktVG86IGF0dGFja2VyQGV2aWwuZXhhbXBsZQ==?=",
        "=?utf-8?q?x=0D=0AContent-Type:_text/html=0D=0A=0D=0A=3Ch1=3EYour_account_is_locked?=",
        "=?utf-8?q?=3D=3Futf-8=3Fq=3Fx=3D0D=3D0ABcc:=5Fe@x.example=3F=3D?=",
    ],
)
def test_the_reported_values(value: str) -> None:
    rendered = RenderedDigest(subject=f"5 new entries: {value}", text="text\n", html="<p>html</p>\n")
    assert_clean(build_message(rendered, headers_for(value), SENDER).as_bytes(), EXPECTED)


@pytest.mark.parametrize(
    "name",
    [
        "=?utf-8?q?x=0D=0ABcc:_evil@x.example?=",
        "=?utf-8?b?eA0KQmNjOiBldmlsQHguZXhhbXBsZQ==?=",
        "Ada =?utf-8?q?=E2=80=A8To:_x@y.z?=",
    ],
)
def test_a_name_that_decodes_to_a_line_break_is_refused(name: str) -> None:
    with pytest.raises(SubscriberInputError, match="^name: "):
        clean_fields("n5@example.com", name=name)


def test_a_harmless_encoded_name_is_stored_decoded() -> None:
    assert clean_fields("n5@example.com", name="=?utf-8?q?Zo=C3=AB?= Lab").name == "Zoë Lab"


def dump_with_header(header: str) -> bytes:
    return (
        f"Filtered by: {header} × GPU × Clear all\n\n"
        "A paper about kernels\n\nAda Lovelace 2026-06-14\n\nProblem: x. Method: y.\n\nPDF\n"
    ).encode()


def rss_with_category(category: str) -> bytes:
    return (
        f"""<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>
<item><title>A paper about caches</title><link>https://example.org/1</link><guid>1</guid>
<category>{category}</category><description>d</description></item></channel></rss>"""
    ).encode()


@pytest.mark.parametrize(
    "source",
    [
        dump_with_header("=?utf-8?q?x=0D=0ABcc:_evil@x.example=0D=0AX-Injected:_1?="),
        rss_with_category("=?utf-8?b?eQ0KUmVwbHktVG86IGF0dGFja2VyQGV2aWwuZXhhbXBsZQ==?="),
        dump_with_header("=?utf-8?q?x=0D=0AContent-Type:_text/html=0D=0A=0D=0A=3Ch1=3EYour_account_is_locked?="),
    ],
)
def test_tags_from_dumps_and_feeds_reach_the_subject_decoded(
    factory: sessionmaker[Session], tmp_path: Path, source: bytes
) -> None:
    with Sink(SinkHandler()) as sink:
        settings = settings_for(tmp_path, smtp={"port": sink.port, "timeout_seconds": 10})
        save(factory, settings, [clean_fields("ada@example.org", filter="*")], DAY - timedelta(days=1))
        assert ingest_bytes(factory, source, name="evil", now=DAY).new == 1
        with factory() as session:
            (entry,) = list_entries(session)
        assert all("=?" not in tag and not CONTROL_CHARACTERS.search(tag) for tag in entry.tags), entry.tags
        plan(factory, settings, load_rules(ROOT / "config" / "tags.toml"), now=DAY, all_due=True)
        assert asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY)).sent == 1
        raw = sink.received[0].data
    parsed = message_from_bytes(raw, policy=policy.default)
    assert [name.lower() for name, _ in parsed.raw_items()] == [h.lower() for h in EXPECTED]
    assert [part.get_content_type() for part in parsed.iter_parts()] == ["text/plain", "text/html"]
    assert b"Your account is locked</h1>" not in raw.split(b"\r\n\r\n", 1)[0]


def test_json_feed_tags_are_decoded_too(factory: sessionmaker[Session]) -> None:
    feed = {
        "version": "https://jsonfeed.org/version/1.1",
        "items": [{"id": "1", "title": "t", "content_text": "x", "tags": ["=?utf-8?q?gpu=0D=0ABcc:_e@x.example?="]}],
    }
    ingest_bytes(factory, json.dumps(feed).encode(), name="f.json", now=DAY)
    with factory() as session:
        (entry,) = list_entries(session)
    assert entry.tags == ("gpu Bcc: e@x.example",)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sender.from_name", "=?utf-8?q?Digest=0D=0ABcc:_evil@x.example?="),
        ("sender.list_id", "=?utf-8?q?x=0D=0A?=.example"),
        ("web.public_url", "https://digest.example.org/=?utf-8?q?=0D=0ABcc:_e@x.example?="),
        ("web.public_url", "https://digest.example.org/\r\nBcc: e@x.example"),
        ("web.public_url", "javascript:alert(1)"),
    ],
)
def test_header_values_in_the_configuration_are_checked(tmp_path: Path, key: str, value: str) -> None:
    section, name = key.split(".")
    config = tmp_path / "digestbot.toml"
    config.write_text(f"[{section}]\n{name} = {json.dumps(value)}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert key in str(info.value) and "\n" not in str(info.value)
