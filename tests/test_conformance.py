"""Every message standards-clean, on generated digests, by both ways of building one:
the simple path (render, EmailMessage, serialize) and the splice (a template per body,
filled per subscriber).  RFC 2045 (quoted-printable lines), RFC 5322 (line lengths,
folded headers, Date, Message-ID), and the email package parsing it without defects."""

from __future__ import annotations

import re
import tempfile
from dataclasses import replace
from datetime import UTC, date, datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import parsedate_to_datetime
from functools import lru_cache

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.config import Settings
from bot.domain import DigestContent, DigestItem, EntryKind
from bot.mail.mailer import Mailer
from bot.mail.message import Headers, build_message
from bot.mail.parts import Parts
from bot.mail.splice import MessageTemplate, RecipientValues
from bot.plan.message_ids import message_id_for
from bot.tokens import make_token
from tests.conftest import ROOT
from tests.helpers import digest_item, reader

WHEN = datetime(2026, 6, 15, 7, 3, tzinfo=UTC)
_LONG_WORD = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=300, max_size=300)
_LONG_URL = st.builds(
    lambda tail: "https://example.org/" + tail, st.text("abcdef0123456789/-_.~", min_size=80, max_size=200)
)
_PROSE = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from(['"', ",", "é", "😀", "=", "."]),
    max_size=120,
)
_SUMMARY = st.one_of(
    _PROSE,
    st.builds(lambda w, u, p: f"{p} {w} {u} {p}", _LONG_WORD, _LONG_URL, _PROSE),
    st.builds(lambda p: (p + " ") * (5000 // (len(p) + 1) + 1), _PROSE.filter(bool)),  # one 5,000-character line
    st.builds(lambda a, b: f"{a}\r\n{b}\r\n\r\n{a}", _PROSE, _PROSE),  # CRLF inside
)
_NAME = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")) | st.sampled_from(['"', ",", "😀"]),
    max_size=60,
)


def _item(n: int, title: str, summary: str, kind: str) -> DigestItem:
    return digest_item(
        key=f"k{n}",
        kind=EntryKind.PAPER,
        title=title or "untitled",
        authors=("Ada Lovelace", "Kurt Gödel"),
        published=date(2026, 6, 14),
        summary=summary,
        summary_type=kind,
        tags=("gpu", "llm"),
        why="matches everything",
        arxiv_id=f"2606.{n:05d}" if n % 2 else None,
        doi=None,
        links=(),
    )


_CONTENTS = st.builds(
    lambda name, filter_, entries: (name, filter_, entries),
    _NAME,
    st.sampled_from(["", "*", '"kv cache" or gpu']),
    st.lists(st.tuples(_NAME, _SUMMARY, st.sampled_from(["text/plain", "text/html"])), min_size=1, max_size=5),
)


@lru_cache(maxsize=1)
def _mailer() -> Mailer:
    return Mailer(
        Parts(
            Settings.model_validate(
                {
                    "paths": {
                        "var_dir": tempfile.mkdtemp(prefix="conformance-"),
                        "templates_dir": str(ROOT / "templates"),
                    },
                    "sender": {"from_address": "digest@bot.example", "from_name": 'Research "Digest", Ünï 😀'},
                    "web": {"public_url": "https://digest.example.org", "signing_key": "conformance-key-0123456789"},
                }
            )
        )
    )


def _check(data: bytes, rendered_text: str, rendered_html: str) -> None:
    lines = data.split(b"\r\n")
    assert all(len(line) <= 998 for line in lines)
    assert b"\n" not in data.replace(b"\r\n", b"") and b"\r" not in data.replace(b"\r\n", b"")
    head, _, _body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        assert re.fullmatch(rb"[\x21-\x39\x3b-\x7e]+: .*|[ \t].*", line), line  # a field or its folded rest
    message = BytesParser(policy=policy.default).parsebytes(data)
    assert isinstance(message, EmailMessage)
    assert not message.defects
    parts = list(message.iter_parts())
    assert [p.get_content_type() for p in parts] == ["text/plain", "text/html"]
    for part, rendered in zip(parts, (rendered_text, rendered_html), strict=True):
        assert not part.defects
        assert part["Content-Transfer-Encoding"] == "quoted-printable"
        raw = part.get_payload(decode=False)
        assert all(len(line) <= 76 for line in raw.split("\r\n") if line), max(raw.split("\r\n"), key=len)
        shown = part.get_content().replace("\r\n", "\n")
        assert shown == rendered.replace("\r\n", "\n").replace("\r", "\n")
    assert re.fullmatch(r"<digest\.\d+\.[0-9a-f]{12}@bot\.example>", message["Message-ID"])
    assert parsedate_to_datetime(message["Date"]) == WHEN


@settings(max_examples=150, deadline=None)
@given(contents=_CONTENTS, subscriber_name=_NAME)
def test_generated_digests_are_standards_clean_by_both_paths(
    contents: tuple[str, str, list[tuple[str, str, str]]], subscriber_name: str
) -> None:
    mailer = _mailer()
    _, filter_, entries = contents
    subscriber = reader(42, name=subscriber_name, filter=filter_)
    items = tuple(_item(n, title, summary, kind) for n, (title, summary, kind) in enumerate(entries, start=1))
    content = DigestContent(digest_id=7, kind="scheduled", local_date=WHEN.date(), subscriber=subscriber, items=items)
    token = make_token(mailer.key, subscriber.id, subscriber.unsubscribe_secret)
    links, unsubscribe = mailer.links_for_token(token)
    rendered = mailer.renderer.render(content, links)
    message_id = message_id_for(7, 42, WHEN.date(), "scheduled", mailer.settings.sender)
    headers = Headers(subscriber.name, subscriber.email, message_id, WHEN, unsubscribe)
    simple = build_message(rendered, headers, mailer.settings.sender).as_bytes()
    _check(simple, rendered.text, rendered.html)

    template = MessageTemplate.build(
        mailer.renderer,
        content,
        mailer.settings.sender,
        mailer.links_for_token,
        footer_substituted=mailer.footer_substituted,
    )
    if template is not None:  # else every message of this body is built the simple way
        spliced = template.fill(
            RecipientValues(subscriber.email, subscriber.name, subscriber.email, token, message_id, WHEN)
        )
        assert spliced == simple
        other = replace(subscriber, id=43, email="other@example.org", name="Other")
        other_token = make_token(mailer.key, 43, other.unsubscribe_secret)
        other_id = message_id_for(8, 43, WHEN.date(), "scheduled", mailer.settings.sender)
        filled = template.fill(RecipientValues(other.email, other.name, other.email, other_token, other_id, WHEN))
        again = mailer.renderer.render(replace(content, subscriber=other), mailer.links_for_token(other_token)[0])
        _check(filled, again.text, again.html)
        assert other_id != message_id


def test_the_bulk_sender_checklist() -> None:
    """Gmail's and Yahoo's 2024 rules, as far as one message shows them."""
    base = _mailer().settings
    for public_url, feedback in (("https://digest.example.org", "digest:{list_id}:{domain}"), ("", "")):
        mailer = Mailer(
            Parts(
                base.model_copy(
                    update={
                        "web": base.web.model_copy(update={"public_url": public_url}),
                        "sender": base.sender.model_copy(
                            update={"feedback_id": feedback, "list_id": "list.bot.example"}
                        ),
                    }
                )
            )
        )
        subscriber = reader(5)
        items = (_item(1, "A paper", "Its summary.", "text/plain"),)
        content = DigestContent(
            digest_id=7, kind="scheduled", local_date=WHEN.date(), subscriber=subscriber, items=items
        )
        token = make_token(mailer.key, 5, subscriber.unsubscribe_secret)
        links, unsubscribe = mailer.links_for_token(token)
        rendered = mailer.renderer.render(content, links)
        message_id = message_id_for(7, 5, WHEN.date(), "scheduled", mailer.settings.sender)
        data = build_message(
            rendered, Headers("Reader", subscriber.email, message_id, WHEN, unsubscribe), mailer.settings.sender
        ).as_bytes()
        template = MessageTemplate.build(
            mailer.renderer, content, mailer.settings.sender, mailer.links_for_token, footer_substituted=True
        )
        assert template is not None
        assert (
            template.fill(RecipientValues(subscriber.email, "Reader", subscriber.email, token, message_id, WHEN))
            == data
        )
        message = BytesParser(policy=policy.default).parsebytes(data)
        assert isinstance(message, EmailMessage)
        text, html = (message.get_body((kind,)) for kind in ("plain", "html"))
        assert text is not None and html is not None
        # A visible unsubscribe link in both parts, the header's first URI among them.
        first = re.match(r"<([^>]+)>", message["List-Unsubscribe"])
        assert first is not None
        assert first.group(1) in text.get_content()
        assert re.search(rf'<a href="{re.escape(first.group(1))}"[^>]*>Unsubscribe</a>', html.get_content())
        if public_url:
            assert first.group(1).startswith("https://digest.example.org/u/")
            assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
            assert message["Feedback-ID"] == "digest:list.bot.example:bot.example"
        else:
            assert first.group(1).startswith("mailto:") and message["List-Unsubscribe-Post"] is None
            assert message["Feedback-ID"] is None
        # From and Message-ID in the sender's domain; Auto-Submitted, and no Precedence.
        assert message["From"].addresses[0].domain == "bot.example"
        assert message["Message-ID"].endswith("@bot.example>")
        assert message["Auto-Submitted"] == "auto-generated" and message["Precedence"] is None
