"""News about a reader's library: a paper they keep gets a new arXiv version or a code
or model link, and their next digest lists it under "Your library", once, whether or not
the bot ever sent it; a library paper the store has never seen is matched the day it
arrives (by arXiv id, DOI or title)."""

from __future__ import annotations

import asyncio
import html as html_lib
import json
import re
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.domain import EntryNews
from bot.domain.identity import normalize_title, title_key
from bot.ingest.resolve import gained_code
from bot.ingest.storing import ingest_bytes
from bot.mail.parts import Parts
from bot.plan import plan
from bot.plan.news import LIBRARY_PER_DIGEST, library_news, news_line
from bot.store.library import library_of
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save, set_setting
from bot.taste.library_service import import_library
from bot.tools.sink import Sink
from tests.conftest import FIXTURES, ROOT
from tests.helpers import render_dump, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 15, 12, tzinfo=UTC)
SPARSE = "Sparse Attention for Million-Token Contexts"
CODE = "https://github.com/example/sparse-attention"


def _settings(tmp_path: Path, sink: Sink) -> Settings:
    return settings_for(
        tmp_path,
        smtp={"port": sink.port, "timeout_seconds": 5},
        sender={"from_address": "digest@bot.example", "from_name": "Research Digest"},
    )


def _id(factory: sessionmaker[Session], email: str) -> int:
    with factory() as session:
        found = get_subscriber(session, email)
    assert found is not None
    return found.id


def _cycle(factory: sessionmaker[Session], settings: Settings, sink: Sink, at: datetime) -> dict[str, tuple[str, str]]:
    """Plan and deliver at *at*: (plain text on one line, HTML on one line) by recipient."""
    plan(factory, settings, RULES, now=at, all_due=True)
    before = len(sink.received)
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: at))
    found = {}
    for received in sink.received[before:]:
        message = BytesParser(policy=policy.default).parsebytes(received.data)
        assert isinstance(message, EmailMessage)
        text, html = message.get_body(("plain",)), message.get_body(("html",))
        assert text is not None and html is not None
        found[received.recipients[0]] = (
            " ".join(text.get_content().split()),
            html_lib.unescape(" ".join(html.get_content().split())),
        )
    return found


def _library_block(html: str) -> list[tuple[str, str, str]]:
    """(link, title, note) of each line under "Your library" in an HTML part."""
    found = re.search(r">Your library</p>(.*?)</ul>", html)
    assert found is not None, "no library news"
    lines = re.findall(r'<li[^>]*><a href="([^"]*)"[^>]*>(.*?)</a> <span[^>]*>(.*?)</span></li>', found.group(1))
    return [(href, title, note) for href, title, note in lines]


def _day(n: int, spiking_title: str, sparse_summary: str) -> bytes:
    """A dump of one spiking paper (what the readers' filter matches) and the sparse one."""
    papers = [
        (spiking_title, ["Ada Lovelace"], date(2026, 6, 14 + n), "Spiking neural networks on a chip."),
        (SPARSE, ["Grace Hopper"], date(2026, 6, 14), sparse_summary),
    ]
    return render_dump(papers).encode()


def test_code_for_a_kept_paper_never_sent_is_news_once(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    settings = _settings(tmp_path, sink)
    people = [clean_fields(f"{who}@example.org", filter="snn") for who in ("keeper", "other", "late", "quiet")]
    save(factory, settings, people, DAY - timedelta(days=2))
    set_setting(factory, "quiet@example.org", "send_updates", False, DAY - timedelta(days=2))
    bibtex = f"@article{{s, title={{{SPARSE.lower()}}}}}\n".encode()
    for who in ("keeper", "quiet"):  # imported before the store has seen the paper
        import_library(factory, _id(factory, f"{who}@example.org"), bibtex, DAY - timedelta(days=1))
    keeper = _id(factory, "keeper@example.org")
    with factory() as session:
        assert [p.entry_id for p in library_of(session, keeper)] == [None]

    ingest_bytes(
        factory, _day(1, "Spiking Chips One", "Sparse attention, no code yet."), name="d1", now=DAY, rules=RULES
    )
    with factory() as session:
        assert [p.entry_id is not None for p in library_of(session, keeper)] == [True]  # matched on arrival
    day1 = _cycle(factory, settings, sink, DAY)
    assert "Your library" not in day1["keeper@example.org"][0]  # arriving is not news

    day2_at = DAY + timedelta(days=1)
    import_library(factory, _id(factory, "late@example.org"), bibtex, day2_at - timedelta(hours=1))
    with_code = f"Sparse attention, code at {CODE}."
    ingest_bytes(factory, _day(2, "Spiking Chips Two", with_code), name="d2", now=day2_at, rules=RULES)
    day2 = _cycle(factory, settings, sink, day2_at)
    text, html = day2["keeper@example.org"]
    assert f"Your library ------------ * {SPARSE} (code released) {CODE}" in text
    assert _library_block(html) == [(CODE, SPARSE, "(code released)")]
    assert "Spiking Chips Two" in text and SPARSE not in text.split("Your library")[0]  # never an entry
    for other in ("other", "quiet"):  # keeps no such paper; does not want news
        assert "Your library" not in day2[f"{other}@example.org"][0]
    assert "Your library" in day2["late@example.org"][0]  # added before the code came

    day3_at = day2_at + timedelta(days=1)
    ingest_bytes(
        factory,
        _day(3, "Spiking Chips Three", "Sparse attention, a shorter summary."),
        name="d3",
        now=day3_at,
        rules=RULES,
    )
    ingest_bytes(factory, _day(3, "Spiking Chips Three", with_code), name="d3b", now=day3_at, rules=RULES)
    day3 = _cycle(factory, settings, sink, day3_at)
    assert "Your library" not in day3["keeper@example.org"][0]  # told once; the same link is no news


def test_a_new_version_of_a_kept_paper_is_news_and_told_once_with_what_was_sent(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    settings = _settings(tmp_path, sink)
    save(factory, settings, [clean_fields("keeper@example.org", filter='"spiking"')], DAY - timedelta(days=2))
    save(factory, settings, [clean_fields("both@example.org")], DAY - timedelta(days=2))
    for who in ("keeper", "both"):
        import_library(factory, _id(factory, f"{who}@example.org"), b"arXiv:2606.01234v1\n", DAY - timedelta(days=1))
    ingest_bytes(factory, (FIXTURES / "arxiv_day1.rss").read_bytes(), name="d1", now=DAY, rules=RULES)
    day1 = _cycle(factory, settings, sink, DAY)
    assert "keeper@example.org" not in day1  # nothing on spiking networks that day
    day2_at = DAY + timedelta(days=1)
    ingest_bytes(factory, (FIXTURES / "arxiv_day2.rss").read_bytes(), name="d2", now=day2_at, rules=RULES)
    day2 = _cycle(factory, settings, sink, day2_at)
    title = "Elastic KV-Cache Offloading for Multi-Tenant LLM Serving Systems"
    note = 'new version: title was "Elastic KV Cache Offloading for Multi-Tenant LLM Serving"; abstract revised'
    text, html = day2["keeper@example.org"]
    assert f"Your library ------------ * {title} ({note}) https://arxiv.org/abs/2606.01234" in text
    assert _library_block(html) == [("https://arxiv.org/abs/2606.01234", title, f"({note})")]
    both = day2["both@example.org"][0]  # was sent it on day 1: told once, as sent
    assert "Updated since we sent it" in both and "Your library" not in both
    day3_at = day2_at + timedelta(days=1)
    ingest_bytes(factory, _day(3, "Spiking Chips Three", "Sparse."), name="d3", now=day3_at, rules=RULES)
    for text, _ in _cycle(factory, settings, sink, day3_at).values():
        assert "Your library" not in text and "Updated since" not in text


def test_kept_papers_are_matched_on_arrival_by_arxiv_id_doi_or_title(factory: sessionmaker[Session]) -> None:
    save(factory, Settings(), [clean_fields("keeper@example.org")], DAY)
    keeper = _id(factory, "keeper@example.org")
    export = (
        b"@article{a, title={Elastic caches}, eprint={2606.01234}, archivePrefix={arXiv}}\n"
        b"@article{b, title={A Paper Known By Its DOI}, doi={10.1000/known.1}}\n"
        b"@article{c, title={Spiking Chips: a Survey}, doi={10.1000/other.2}}\n"
        b"@article{d, title={Never Arrives}}\n"
        b"@article{e, title={Spiking Chips One}, eprint={2999.00001}, archivePrefix={arXiv}}\n"
    )
    import_library(factory, keeper, export, DAY)
    ingest_bytes(factory, (FIXTURES / "arxiv_day1.rss").read_bytes(), name="feed", now=DAY, rules=RULES)
    feed = (
        '{"version": "https://jsonfeed.org/version/1.1", "title": "j", "items": [{"id": "x", '
        '"url": "https://doi.org/10.1000/known.1", "title": "Another title entirely"}]}'
    )
    ingest_bytes(factory, feed.encode(), name="j.json", now=DAY, rules=RULES)
    papers = [("Spiking chips - a survey!", "Problem."), ("Spiking Chips One", "Two papers share a title.")]
    ingest_bytes(
        factory,
        render_dump([(t, ["A"], date(2026, 6, 14), s) for t, s in papers]).encode(),
        name="d",
        now=DAY,
        rules=RULES,
    )
    with factory() as session:
        matched = {p.key: p.entry_id is not None for p in library_of(session, keeper)}
    assert matched == {
        "arxiv:2606.01234": True,  # by its arXiv id
        "doi:10.1000/known.1": True,  # by its DOI, whatever the title
        "doi:10.1000/other.2": True,  # by its title: the dump names no DOI
        title_key(normalize_title("Never Arrives")): False,  # keyed by its title; never listed
        "arxiv:2999.00001": True,  # by title, the dump naming no id either
    }


def test_a_summary_naming_thousands_of_repositories_keeps_a_few(factory: sessionmaker[Session]) -> None:
    from bot.ingest.resolve import MAX_NAMED_CODE_LINKS
    from bot.store.entry_reads import find_entry

    summary = " ".join(f"https://github.com/o/r{n}" for n in range(20_000))
    feed = json.dumps(
        {"version": "https://jsonfeed.org/version/1.1", "title": "j", "items": [
            {"id": "x", "url": "https://example.org/p", "title": "Many repositories", "content_text": summary}
        ]}
    )  # fmt: skip
    ingest_bytes(factory, feed.encode(), name="many.json", now=DAY)
    with factory() as session:
        entry = find_entry(session, title_key(normalize_title("Many repositories")))
    assert entry is not None
    assert entry.content.links == (
        "https://example.org/p",
        *(f"https://github.com/o/r{n}" for n in range(MAX_NAMED_CODE_LINKS)),
    )


def _news(entry_id: int, *, revised: datetime | None = None, linked: datetime | None = None) -> EntryNews:
    links = (CODE,) if linked else ()
    return EntryNews(entry_id, f"Paper {entry_id}", "2606.00001", revised, "abstract revised", linked, links)


def test_the_library_rule_tells_news_after_the_paper_was_added_or_last_told_a_few_at_a_time() -> None:
    added, told = DAY, DAY + timedelta(days=2)
    news = {
        1: _news(1, linked=DAY + timedelta(days=1)),
        2: _news(2, revised=DAY + timedelta(days=1)),
        3: _news(3, linked=DAY - timedelta(days=1)),
    }
    news |= {100 + i: _news(100 + i, revised=DAY + timedelta(hours=i + 1)) for i in range(LIBRARY_PER_DIGEST + 2)}
    keepers = [
        (7, 1, added, None),  # code after it was added: told
        (7, 2, added, told),  # told after the revision already: not again
        (7, 3, added, None),  # code before it was added: not news to them
        (8, 3, DAY - timedelta(days=2), None),  # but to one who added it before
    ] + [(9, 100 + i, added, None) for i in range(LIBRARY_PER_DIGEST + 2)]
    found = library_news(keepers, news)
    assert found[7] == [(1, added)] and found[8] == [(3, DAY - timedelta(days=2))]
    assert [entry for entry, _ in found[9]] == [100 + i for i in range(LIBRARY_PER_DIGEST)]  # oldest first
    both = _news(5, revised=DAY + timedelta(hours=1), linked=DAY + timedelta(hours=2))
    assert news_line(both, DAY)["note"] == "new version: abstract revised; code released"
    assert news_line(both, DAY)["url"] == CODE
    assert news_line(both, DAY + timedelta(hours=1))["note"] == "code released"
    hub = "https://huggingface.co/org/model"
    model = EntryNews(6, "M", None, None, None, DAY, ("https://example.org/paper", hub))
    assert news_line(model, DAY - timedelta(days=1)) == {
        "title": "M",
        "note": "model released",
        "url": hub,
        "library": True,
    }
    both_links = replace(model, links=(hub, CODE, "https://gitlab.com/a/b"))
    assert news_line(both_links, DAY - timedelta(days=1))["note"] == "code and model released"
    assert news_line(both_links, DAY - timedelta(days=1))["url"] == "https://gitlab.com/a/b"


URLS = st.sampled_from(
    [
        CODE,
        CODE.upper().replace("HTTPS", "https"),
        "https://gitlab.com/a/b",
        "https://huggingface.co/a/b",
        "https://arxiv.org/abs/2606.00001",
        "https://example.org/x",
    ]
)


@given(st.lists(URLS, max_size=5), st.lists(URLS, max_size=5))
def test_a_paper_gains_code_only_by_a_code_link_it_did_not_have(before: list[str], added: list[str]) -> None:
    from bot.domain.links import code_links
    from bot.ingest.resolve import merged_links

    after = merged_links(before, added)
    known = {u.lower() for u in code_links(before)}
    assert gained_code(before, after) == any(u.lower() not in known for u in code_links(added))
    assert not gained_code(after, after)
