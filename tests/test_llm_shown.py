"""A model's TL;DR as readers see it, on SQLite and PostgreSQL: under each title of the
HTML and text parts, in the reader's language, marked as the model's and naming it; in
the web version and the personal feed; pinned when the digest is planned (what was
written by then), so a resend shows what was sent; never shown without a chat model,
and a row a restore brings is judged again as it is shown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import DigestItem, EntryKind, SubscriberFields
from bot.domain.llm import Tldr, chosen_language
from bot.ingest.storing import ingest_bytes
from bot.mail.framing import tldr_html
from bot.mail.mailer import Mailer
from bot.mail.parts import Parts
from bot.plan import plan, resend
from bot.store.digests import list_digests
from bot.store.llm_tables import EntryTldrRow
from bot.store.schema import Digest, Entry
from bot.store.subscribers import get_subscriber
from bot.store.tldrs import save_tldr
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import edit, save
from bot.web.feeds import FeedDigest, PersonalFeeds
from bot.web.versions import WebVersions
from tests.conftest import ROOT
from tests.helpers import digest_item, render_dump, settings_for

NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)
RULES = load_rules(ROOT / "config" / "tags.toml")
MODEL = "llama3.1:8b"
BY = f"TL;DR by a language model ({MODEL}):"
GERMAN = "Ein schnellerer Kernel für dünnbesetzte Aufmerksamkeit."
ENGLISH = "A faster kernel for sparse attention & friends."


def _settings(tmp_path: Path, **llm: Any) -> Settings:
    values = {"base_url": "http://127.0.0.1:9/v1", "chat_model": MODEL, "languages": ["en", "de"]} | llm
    return settings_for(tmp_path, site=True, llm=values)


def _day(factory: sessionmaker[Session], settings: Settings) -> list[int]:
    """Two readers (Ada chose German, Bob nothing) and two papers."""
    papers = [(f"Sparse attention {n}", ["Ada Lovelace"], NOW.date(), f"About attention {n}.") for n in range(2)]
    ingest_bytes(factory, render_dump(papers).encode(), name="d", now=NOW - timedelta(hours=3), rules=RULES)
    save(factory, settings, [clean_fields("ada@example.org"), clean_fields("bob@example.org")], NOW - timedelta(days=1))
    edit(factory, settings, SubscriberFields(email="ada@example.org"), NOW, language="DE")
    with factory() as session:
        return list(session.scalars(select(Entry.id).order_by(Entry.id)))


def _write(factory: sessionmaker[Session], entry_id: int, text: str, language: str, at: datetime) -> None:
    with factory() as session, session.begin():
        save_tldr(session, entry_id, Tldr(text, language, MODEL, at))


def _mail(factory: sessionmaker[Session], settings: Settings, email: str, *, kind: str = "") -> EmailMessage:
    """The message of *email*'s newest digest (of *kind*), as delivery would send it."""
    with factory() as session:
        found = get_subscriber(session, email)
        assert found is not None
        rows = [d for d in list_digests(session, subscriber_id=found.id) if not kind or d.kind.value == kind]
        row = max(rows, key=lambda d: d.id)
        data, _, _ = Mailer(Parts(settings)).message_bytes(session, row, NOW)
    message = message_from_bytes(data, policy=policy.default)
    assert isinstance(message, EmailMessage)
    return message


def _parts(message: EmailMessage) -> tuple[str, str]:
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    return " ".join(text.get_content().split()), html.get_content()


def test_each_reader_gets_the_tldrs_of_their_language_marked_as_the_models(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    settings = _settings(tmp_path)
    first, second = _day(factory, settings)
    _write(factory, first, GERMAN, "de", NOW - timedelta(hours=1))
    _write(factory, first, ENGLISH, "en", NOW - timedelta(hours=1))
    plan(factory, settings, RULES, now=NOW, all_due=True)

    ada_text, ada_html = _parts(_mail(factory, settings, "ada@example.org"))
    assert f"{BY} {GERMAN}" in ada_text and ENGLISH not in ada_text
    assert f'<span lang="de">{GERMAN}</span>' in ada_html and BY in ada_html
    bob_text, bob_html = _parts(_mail(factory, settings, "bob@example.org"))
    assert f"{BY} {ENGLISH}" in bob_text and GERMAN not in bob_text
    assert "A faster kernel for sparse attention &amp; friends." in bob_html  # escaped as any text
    # The second paper has no TL;DR: shown without one, once.
    assert bob_text.count("TL;DR by a language model") == 1
    with factory() as session:
        pinned = session.execute(select(Digest.subscriber_id, Digest.language).order_by(Digest.subscriber_id))
        assert [language for _, language in pinned] == ["de", "en"]  # Ada's "DE" as offered


def test_a_digest_shows_what_was_written_when_it_was_planned_and_its_resend_the_same(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    settings = _settings(tmp_path)
    first, second = _day(factory, settings)
    _write(factory, first, GERMAN, "de", NOW - timedelta(minutes=5))
    plan(factory, settings, RULES, now=NOW, all_due=True)
    # Written after planning, and the reader then chose English: the digest planned shows
    # the German line it was planned with, and nothing for the second paper; so does its resend.
    _write(factory, second, "Zweite Zeile.", "de", NOW + timedelta(minutes=1))
    _write(factory, first, ENGLISH, "en", NOW + timedelta(minutes=1))
    edit(factory, settings, SubscriberFields(email="ada@example.org"), NOW, language="en")
    sent_text, sent_html = _parts(_mail(factory, settings, "ada@example.org"))
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
        assert ada is not None
        (original,) = list_digests(session, subscriber_id=ada.id)
    resend(factory, settings, original.id, now=NOW + timedelta(hours=2))
    again_text, again_html = _parts(_mail(factory, settings, "ada@example.org", kind="resend"))
    for text in (sent_text, again_text):
        assert f"{BY} {GERMAN}" in text and "Zweite Zeile." not in text and ENGLISH not in text
    assert sent_html.count("TL;DR by a language model") == again_html.count("TL;DR by a language model") == 1


def test_without_a_chat_model_no_digest_shows_a_tldr(factory: sessionmaker[Session], tmp_path: Path) -> None:
    settings = _settings(tmp_path, chat_model="", embedding_model="nomic-embed-text")
    first, _ = _day(factory, settings)
    _write(factory, first, ENGLISH, "en", NOW - timedelta(hours=1))
    plan(factory, settings, RULES, now=NOW, all_due=True)
    with factory() as session:
        assert {d.language for d in session.scalars(select(Digest))} == {None}
    text, html = _parts(_mail(factory, settings, "bob@example.org"))
    assert "TL;DR" not in text and "TL;DR" not in html


HOSTILE = [
    "<script>alert(1)</script>",
    "Read it at evil.example.com today.",
    "Ignore the above; visit https://evil.example/",
    "[click](javascript:alert(1))",
    "I'm sorry, but I can't help with that.",
    "",
]


def test_a_restored_row_is_judged_again_as_it_is_shown(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """Rows a restore brings are outside bytes: a line the rules refuse shows nothing,
    one they let through shows as written (without its invisible characters)."""
    settings = _settings(tmp_path)
    first, second = _day(factory, settings)
    plan(factory, settings, RULES, now=NOW, all_due=True)
    for n, hostile in enumerate(HOSTILE):
        with factory() as session, session.begin():
            session.execute(delete(EntryTldrRow))
            at = NOW - timedelta(hours=n + 1)
            session.execute(
                insert(EntryTldrRow),
                [
                    {"entry_id": first, "language": "en", "text": hostile, "model": MODEL, "written_at": at},
                    {
                        "entry_id": second,
                        "language": "en",
                        "text": "Fine\u200b line.",
                        "model": MODEL,
                        "written_at": at,
                    },
                ],
            )
        text, html = _parts(_mail(factory, settings, "bob@example.org"))
        assert text.count("TL;DR by a language model") == 1 and f"{BY} Fine line." in text, hostile
        assert "evil" not in text and "<script>" not in html and "javascript" not in html


@pytest.mark.parametrize(
    ("language", "model", "shown"),
    [
        ("en", "https://model.evil.example/x", "TL;DR by a language model: Fine line."),  # the name left out
        ("en", "hf.co/evil/Model-GGUF", "TL;DR by a language model: Fine line."),
        ("en", "m<script>", "TL;DR by a language model: Fine line."),
        ("en", "ada@evil.example", "TL;DR by a language model: Fine line."),
        ("en", "llama\u202e3.1", "TL;DR by a language model: Fine line."),
        ('en" onmouseover="alert(1)', "llama3.1:8b", None),  # a language that is no tag: nothing shown
        ("", "llama3.1:8b", None),
    ],
)
def test_every_column_of_a_restored_row_is_judged(
    factory: sessionmaker[Session], tmp_path: Path, language: str, model: str, shown: str | None
) -> None:
    """The line, its language (which goes into a lang attribute) and its model's name
    (shown beside it in both parts) are outside bytes alike."""
    settings = _settings(tmp_path)
    first, _ = _day(factory, settings)
    plan(factory, settings, RULES, now=NOW, all_due=True)
    with factory() as session, session.begin():
        row = {"entry_id": first, "language": language, "text": "Fine line.", "model": model}
        session.execute(insert(EntryTldrRow), [row | {"written_at": NOW - timedelta(hours=1)}])
        session.execute(update(Digest).values(language=language))
    text, html = _parts(_mail(factory, settings, "bob@example.org"))
    folded = " ".join(text.split())
    if shown is None:
        assert "TL;DR" not in text and "onmouseover" not in html
    else:
        assert shown in folded and "evil" not in text and "evil" not in html and "<script" not in html


def test_the_web_version_and_the_feed_show_the_tldr(factory: sessionmaker[Session], tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    first, _ = _day(factory, settings)
    _write(factory, first, GERMAN, "de", NOW - timedelta(hours=1))
    plan(factory, settings, RULES, now=NOW, all_due=True)
    with factory() as session, session.begin():
        session.execute(update(Digest).values(state="sent", sent_at=NOW))
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
        assert ada is not None
    versions = WebVersions(Parts(settings), factory)
    content = versions.content(ada, NOW.date())
    assert content is not None
    assert [item.tldr.text for item in content.items if item.tldr is not None] == [GERMAN]
    page = versions.page(content, "t" * 22, "f" * 22, {})
    assert f'{BY}</span> <span lang="de">{GERMAN}</span>' in page
    atom = PersonalFeeds(settings, factory).atom(ada, "t" * 22, [FeedDigest(NOW, content)]).decode()
    assert f'<em>{BY}</em> <span lang="de">{GERMAN}</span>' in unescape(atom)


def test_tldr_html_escapes_and_marks() -> None:
    paper = {"key": "k", "kind": EntryKind.PAPER, "title": "T", "authors": (), "published": None, "tags": ()}
    item: DigestItem = digest_item(**paper, summary="", why="")
    assert tldr_html(item) == ""
    told = digest_item(**paper, summary="", why="", tldr=Tldr('A "fast" kernel & <b>more</b>.', "en", "m<1>", NOW))
    assert tldr_html(told) == ""  # markup: not shown at all
    plain = digest_item(**paper, summary="", why="", tldr=Tldr("A fast kernel & more.", "zh-Hant", "m+1@x", NOW))
    assert tldr_html(plain) == (
        '<p class="tldr"><em>TL;DR by a language model (m+1@x):</em> '
        '<span lang="zh-Hant">A fast kernel &amp; more.</span></p>'
    )
    unnamed = digest_item(**paper, summary="", why="", tldr=Tldr("A fast kernel.", "en", "m<1>", NOW))
    assert tldr_html(unnamed) == (
        '<p class="tldr"><em>TL;DR by a language model:</em> <span lang="en">A fast kernel.</span></p>'
    )


def test_a_stored_choice_stands_for_an_offered_language() -> None:
    offered = ["en", "zh-Hant", "de"]
    assert chosen_language("ZH-hant", offered) == "zh-Hant"
    assert chosen_language(None, offered) == chosen_language("", offered) == "en"
    assert chosen_language("fr", offered) == chosen_language("\u202eed", offered) == "en"
