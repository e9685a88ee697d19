"""A reader's own Atom feed (``/f/TOKEN.atom``): what their recent digests carried, one
entry per paper, valid Atom by two readers (feedparser, and atoma, which refuses a feed
missing what RFC 4287 requires), answered 304 to a feed program that already has it,
and behind the same token as the reader's other pages."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET  # noqa: N817
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import atoma
import feedparser
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.domain import DigestContent, EntryKind
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tokens import make_token, signing_key
from bot.tools.sink import Sink
from bot.web import create_app
from bot.web.feeds import FeedDigest, PersonalFeeds, feed_entry_id, feed_title
from tests.conftest import ROOT
from tests.helpers import Server, digest_item, settings_for
from tests.helpers import reader as one_reader

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY1 = datetime(2026, 6, 14, 12, tzinfo=UTC)
SITE = "https://digest.example.org"


@pytest.fixture
def web_settings(tmp_path: Path, sink: Sink) -> Settings:
    return settings_for(
        tmp_path,
        smtp={"port": sink.port, "timeout_seconds": 5},
        sender={"from_address": "digest@bot.example", "from_name": "Research Digest"},
        web={"public_url": SITE, "signing_key": "f" * 32},
    )


def _day(factory: sessionmaker[Session], settings: Settings, seed: Path, now: datetime) -> None:
    ingest_file(factory, seed, now=now - timedelta(hours=1), rules=RULES)
    plan(factory, settings, RULES, now=now, all_due=True)
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: now))


def _token(factory: sessionmaker[Session], settings: Settings, email: str) -> str:
    with factory() as session:
        found = get_subscriber(session, email)
    assert found is not None
    return make_token(signing_key(settings), found.id, found.unsubscribe_secret)


def test_the_feed_lists_each_paper_sent_once_and_a_feed_program_gets_a_304(
    factory: sessionmaker[Session], web_settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    readers = [
        clean_fields("ada@example.org"),
        clean_fields("bob@example.org", filter='Serving: llm; Attention: "sparse attention"'),
    ]
    save(factory, web_settings, readers, DAY1 - timedelta(days=1))
    _day(factory, web_settings, seed_files[0], DAY1)
    ada, bob = (_token(factory, web_settings, e) for e in ("ada@example.org", "bob@example.org"))
    sent = {r.recipients[0]: r.message for r in sink.received}
    with Server(create_app(web_settings, factory, clock=lambda: DAY1 + timedelta(hours=2))) as web:
        first = web.get(f"/f/{ada}.atom")
        assert first.status_code == 200, first.text
        assert first.headers["content-type"] == "application/atom+xml; charset=utf-8"
        parsed = feedparser.parse(first.content)
        assert not parsed.bozo, parsed.get("bozo_exception")
        assert parsed.version == "atom10"
        strict = atoma.parse_atom_bytes(first.content)
        titles = [entry.title for entry in parsed.entries]
        assert len(titles) == len(strict.entries) > 3 and len(set(e.id for e in parsed.entries)) == len(titles)
        mailed = " ".join(sent["ada@example.org"].get_body(("plain",)).get_content().split())
        assert all(" ".join(title.split())[:40] in mailed for title in titles), (titles, mailed)
        assert all(entry.link.startswith("https://") for entry in parsed.entries)
        # Issue 48, item 7: a feed program's preview shows the abstract, the why line after
        # it in the content, in the reader's words.
        for entry in parsed.entries:
            assert ": tag (" not in entry.summary and "Matches your" not in entry.summary, entry.summary
            assert len(entry.summary) > 40 and entry.summary[:30] in " ".join(entry.content[0].value.split())
            assert "Matches your" in entry.content[0].value or "You asked for every paper" in entry.content[0].value
        assert parsed.feed.links[0].href == f"{SITE}/f/{ada}.atom"
        # Issue 65, item 6: the feed's own page (what newsboat's OPML export lists) is the
        # newest digest's web version; the feed is named by whose papers they are; each
        # paper carries its own time, not the send time of its digest.
        alternate = [link.href for link in parsed.feed.links if link.rel == "alternate"]
        assert alternate == [f"{SITE}/d/{ada}/{DAY1.date().isoformat()}"]
        assert parsed.feed.title == "Research Digest: every new paper"  # her filter is *
        published = {entry.updated for entry in parsed.entries}  # the seed's papers: all of 14 June
        assert published == {"2026-06-14T00:00:00Z"} != {parsed.feed.updated}  # the feed's: the send time
        bobs = feedparser.parse(web.get(f"/f/{bob}.atom").content)
        assert bobs.feed.title.endswith("your papers on Serving, Attention")

        again = web.get(f"/f/{ada}.atom", headers={"If-None-Match": first.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        since = web.get(f"/f/{ada}.atom", headers={"If-Modified-Since": first.headers["last-modified"]})
        assert since.status_code == 304
        stale = web.get(f"/f/{ada}.atom", headers={"If-None-Match": '"something-else"'})
        assert stale.status_code == 200
        # RFC 9110's weak comparison: a proxy may hand on W/"...".
        tag = first.headers["etag"]
        for given in (f"W/{tag}", f'"other", W/{tag}', f'W/"a,b", {tag}'):
            assert web.get(f"/f/{ada}.atom", headers={"If-None-Match": given}).status_code == 304, given
        assert web.get(f"/f/{ada}.atom", headers={"If-None-Match": f'W/{tag[:-2]}x"'}).status_code == 200

        bobs = web.get(f"/f/{bob}.atom").content
        theirs = feedparser.parse(bobs)
        assert 0 < len(theirs.entries) < len(titles)  # only what Bob's filter sent Bob
        assert len(atoma.parse_atom_bytes(bobs).entries) == len(theirs.entries)
        interests = [entry.tags[0] for entry in theirs.entries]  # each paper's interest, first
        assert {i.term for i in interests} <= {"Serving", "Attention"} and interests[0].term == "Serving"
        assert interests[0].label == "Your interest: Serving"
        assert web.get(f"/f/{ada[:-2]}xx.atom").status_code == 404
        assert web.get(f"/f/{ada}.rss").status_code == 404
        manage = web.get(f"/m/{ada}").text
        assert f'href="/f/{ada}.atom"' in manage
        # Issue 47, item 15: once Bob unsubscribes, his feed stops serving his papers.
        gone = web.post(f"/u/{bob}", data={"List-Unsubscribe": "One-Click"})
        assert gone.status_code == 200
        ended = web.get(f"/f/{bob}.atom", headers={"If-None-Match": "*"})
        assert ended.status_code == 410 and "You unsubscribed" in ended.text and "<entry>" not in ended.text
        assert web.get(f"/f/{ada}.atom").status_code == 200

    _day(factory, web_settings, seed_files[1], DAY1 + timedelta(days=1))
    with Server(create_app(web_settings, factory, clock=lambda: DAY1 + timedelta(days=1, hours=2))) as web:
        later = web.get(f"/f/{ada}.atom", headers={"If-None-Match": first.headers["etag"]})
        assert later.status_code == 200
        more = feedparser.parse(later.content)
        assert len(more.entries) > len(titles) and more.entries[-1].title == titles[-1]
        web_version = web.get(f"/d/{ada}/{DAY1.date().isoformat()}").text
        assert f'href="{SITE}/f/{ada}.atom"' in web_version


def test_digests_older_than_the_feed_days_and_resends_are_left_out(
    factory: sessionmaker[Session], web_settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    from bot.plan import resend

    save(factory, web_settings, [clean_fields("ada@example.org")], DAY1 - timedelta(days=1))
    _day(factory, web_settings, seed_files[0], DAY1)
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
    assert ada is not None
    feeds = PersonalFeeds(web_settings, factory)
    listed = feeds.recent(ada, DAY1 + timedelta(hours=2))
    assert len(listed) == 1
    resend(factory, web_settings, listed[0].content.digest_id, now=DAY1 + timedelta(hours=3))
    asyncio.run(deliver_now(factory, Parts(web_settings), clock=lambda: DAY1 + timedelta(hours=3)))
    assert [d.content.digest_id for d in feeds.recent(ada, DAY1 + timedelta(hours=4))] == [listed[0].content.digest_id]
    assert feeds.recent(ada, DAY1 + timedelta(days=31)) == []
    empty = feedparser.parse(feeds.atom(ada, "t0ken", []))
    assert not empty.bozo and empty.entries == []


def test_a_feed_only_reader_is_never_mailed_and_never_gets_a_paper_twice(
    factory: sessionmaker[Session], web_settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    """Cadence ``feed``: the day's digest is planned as for anyone and is in the feed at
    once (sent, with no mail); what it carried is theirs, so the next day's has none of it."""
    from bot.domain import DigestState
    from bot.store.digests import list_digests

    readers = [clean_fields("fay@example.org", cadence="feed"), clean_fields("ada@example.org")]
    save(factory, web_settings, readers, DAY1 - timedelta(days=1))
    _day(factory, web_settings, seed_files[0], DAY1)
    with factory() as session:
        fay = get_subscriber(session, "fay@example.org")
        assert fay is not None
        digests = list_digests(session, subscriber_id=fay.id)
    assert [(d.state, d.sent_at) for d in digests] == [(DigestState.SENT, DAY1)]
    from bot.cli.digest_views import digest_story

    with factory() as session:  # what `history` says of each reader's day
        ada = [d for d in list_digests(session) if d.subscriber_email == "ada@example.org"]
    assert digest_story(digests[0], 0, DAY1).startswith("in the feed at ")
    assert digest_story(ada[0], 0, DAY1).startswith("sent at ")
    feeds = PersonalFeeds(web_settings, factory)
    first = [item.key for d in feeds.recent(fay, DAY1 + timedelta(hours=1)) for item in d.content.items]
    assert first
    _day(factory, web_settings, seed_files[1], DAY1 + timedelta(days=1))
    both = [item.key for d in feeds.recent(fay, DAY1 + timedelta(days=1, hours=1)) for item in d.content.items]
    assert len(both) == len(set(both)) > len(first)
    assert [r.recipients[0] for r in sink.received] == ["ada@example.org"] * 2


_ANY_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=()), max_size=60)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    title=_ANY_TEXT,
    why=_ANY_TEXT,
    summary=_ANY_TEXT,
    author=_ANY_TEXT,
    tag=_ANY_TEXT,
    key=st.text(min_size=1, max_size=40),
)
def test_any_text_in_a_paper_makes_a_feed_both_readers_accept(
    title: str, why: str, summary: str, author: str, tag: str, key: str
) -> None:
    settings_ = Settings.model_validate({"web": {"public_url": SITE}})
    item = digest_item(
        key=key,
        kind=EntryKind.PAPER,
        title=title,
        authors=(author,),
        published=date(2026, 6, 1),
        summary=summary,
        summary_type="text/plain",
        tags=(tag,),
        why=why,
        arxiv_id=None,
        doi=None,
        links=("https://example.org/p",),
    )
    reader = one_reader(7, email="ada@example.org")
    content = DigestContent(digest_id=1, kind="scheduled", local_date=DAY1.date(), subscriber=reader, items=(item,))
    body = PersonalFeeds(settings_, None).atom(reader, "t0ken", [FeedDigest(DAY1, content)])  # type: ignore[arg-type]
    ET.fromstring(body)  # well-formed XML 1.0, whatever the bytes of the paper
    parsed = feedparser.parse(body)
    assert not parsed.bozo, parsed.get("bozo_exception")
    strict = atoma.parse_atom_bytes(body)
    assert len(strict.entries) == 1 and strict.entries[0].id_ == feed_entry_id(key)
    assert strict.entries[0].title is not None and strict.entries[0].title.value == feed_title(title, key)
    assert len(parsed.entries) == 1  # feedparser's text is its own (it maps C1 controls as cp1252 does)


def test_an_entrys_time_is_its_papers_day_never_after_it_was_sent() -> None:
    from bot.domain import EntryKind
    from bot.web.feeds import entry_time
    from tests.helpers import digest_item

    sent = datetime(2026, 6, 14, 12, tzinfo=UTC)
    for published, expected in [
        (date(2026, 6, 10), datetime(2026, 6, 10, tzinfo=UTC)),
        (date(2026, 6, 20), sent),  # a date after the send: the send time
        (None, sent),
    ]:
        item = digest_item(
            key="arxiv:2606.00001",
            kind=EntryKind.PAPER,
            title="A paper",
            authors=(),
            summary="",
            published=published,
            tags=(),
            why="",
        )
        assert entry_time(item, sent) == expected
