"""Feedback from the digest and what a reader's model does with it, through real parts:
the planner and the mailer on SQLite and PostgreSQL, the delivered messages from the
test SMTP sink, and the endpoint on uvicorn with httpx.

- every URL of a delivered digest fetched with GET, as a link scanner does, records
  nothing and changes no subscriber;
- "more like this" / "less like this" are a confirmation page (GET) and a POST with
  the page's form token; they replace each other, undo, and train the model;
- the filter atom ``liked``, the threshold, and "Top picks for you".
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit

import httpx
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.contents import digest_content
from bot.store.digests import list_digests
from bot.store.entry_reads import find_entry
from bot.store.schema import BodyItem, Digest, SubscriberRow
from bot.store.taste_tables import Feedback, LibraryPaperRow, TasteModel
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import remove, save
from bot.taste.library import csl_json, read_library
from bot.taste.library_service import feedback, give_feedback, import_library, library, set_taste_threshold
from bot.taste.training import refresh_models
from bot.tools.sink import Sink, SinkHandler
from bot.web import create_app
from bot.web.uploads import READ_SECONDS
from tests.conftest import ROOT
from tests.helpers import Cli, CliResult, Server, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)
PUBLIC = "https://digest.example.org"
FORM = {"content-type": "application/x-www-form-urlencoded"}
SNN_LIBRARY = (Path(__file__).parent / "fixtures" / "library" / "snn.bib").read_bytes()


def _settings(tmp_path: Path, port: int = 25, **digest: object) -> Settings:
    return settings_for(
        tmp_path,
        web={"public_url": PUBLIC, "signing_key": "k" * 32},
        smtp={"port": port, "timeout_seconds": 5},
        sender={"from_address": "digest@bot.example", "from_name": "Research Digest"},
        digest={"max_entries": 30, **digest},
    )


def _subscriber_id(factory: sessionmaker[Session], email: str) -> int:
    with factory() as session:
        found = session.scalar(select(SubscriberRow.id).where(SubscriberRow.email == email))
    assert found is not None
    return int(found)


def _people(factory: sessionmaker[Session], settings: Settings, *people: tuple[str, str]) -> None:
    save(factory, settings, [clean_fields(e, filter=f, backfill="none") for e, f in people], DAY - timedelta(days=1))


def _deliver(factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]) -> dict[str, EmailMessage]:
    """Day 1 to 3 of the seeds planned and delivered; each reader's last message."""
    handler = SinkHandler()
    last: dict[str, EmailMessage] = {}
    with Sink(handler) as sink:
        sending = settings.model_copy(update={"smtp": settings.smtp.model_copy(update={"port": sink.port})})
        for day, path in enumerate(seed_files[:3]):
            now = DAY + timedelta(days=day)
            ingest_file(factory, path, now=now, rules=RULES)
            plan(factory, sending, RULES, now=now, all_due=True)
            asyncio.run(deliver_now(factory, Parts(sending), clock=lambda now=now: now))
    parser = BytesParser(policy=policy.default)
    for received in handler.received:
        message = parser.parsebytes(received.data)
        assert isinstance(message, EmailMessage)
        last[received.recipients[0]] = message
    return last


@pytest.fixture
def delivered(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> tuple[Settings, dict[str, EmailMessage]]:
    """A `*` reader with a library of two SNN papers (so a model), and a `gpu` reader."""
    settings = _settings(tmp_path)
    _people(factory, settings, ("reader@example.org", "*"), ("plain@example.org", "gpu"))
    import_library(factory, _subscriber_id(factory, "reader@example.org"), SNN_LIBRARY, DAY - timedelta(days=1))
    return settings, _deliver(factory, settings, seed_files)


def _parts(message: EmailMessage) -> tuple[str, str]:
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    return text.get_content(), html.get_content()


def _rate_links(message: EmailMessage) -> list[str]:
    """The paths of the digest's "more like this" / "less like this" links, in order."""
    _, html = _parts(message)
    return [urlsplit(u).path for u in re.findall(r'href="([^"]+/(?:more|less))"', html)]


def _state(factory: sessionmaker[Session]) -> tuple[object, ...]:
    """Everything a GET must leave alone: feedback, libraries, and each subscriber."""
    with factory() as session:
        people = session.execute(
            select(
                SubscriberRow.email,
                SubscriberRow.status,
                SubscriberRow.filter,
                SubscriberRow.taste_threshold,
                SubscriberRow.updated_at,
            ).order_by(SubscriberRow.id)
        ).all()
        rated = session.scalar(select(func.count()).select_from(Feedback))
        papers = session.scalar(select(func.count()).select_from(LibraryPaperRow))
    return tuple(people), rated, papers


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src", "action") and value:
                self.found.append(value)


def _urls_of(text: str, html: str, base: str) -> set[str]:
    parser = _Links()
    parser.feed(html)
    found = {urljoin(base, u) for u in parser.found} | set(re.findall(r"https?://[^\s<>\"']+", text))
    return {u for u in found if u.startswith(PUBLIC)}


def test_a_link_scanner_fetching_every_url_records_nothing(
    factory: sessionmaker[Session], delivered: tuple[Settings, dict[str, EmailMessage]]
) -> None:
    settings, messages = delivered
    before = _state(factory)
    seen: set[str] = set()
    fetched = rate_pages = 0
    with Server(create_app(settings, factory)) as client:
        queue: list[str] = []
        for message in messages.values():
            text, html = _parts(message)
            queue += sorted(_urls_of(text, html, PUBLIC))
            queue += re.findall(r"<(https://[^>]+)>", str(message["List-Unsubscribe"]))
        while queue:  # the messages' URLs, and the URLs of the pages they lead to (the web version's buttons)
            url = queue.pop()
            if url in seen or not url.startswith(PUBLIC):
                continue
            seen.add(url)
            response = client.get(urlsplit(url).path)
            fetched += 1
            assert response.status_code in (200, 404), url
            if url.endswith(("/more", "/less")):
                rate_pages += 1
                assert response.status_code == 200 and "like this?" in response.text
            if response.headers.get("content-type", "").startswith("text/html"):
                queue += sorted(_urls_of("", response.text, url))
    assert rate_pages >= 2 * 9 and fetched > rate_pages, (fetched, rate_pages)
    assert _state(factory) == before


def _confirm_form(client: httpx.Client, path: str) -> str:
    page = client.get(path)
    assert page.status_code == 200
    found = re.search(r'name="form" value="([0-9a-f]+)"', page.text)
    assert found is not None, page.text
    return found.group(1)


def test_more_less_and_undo_from_the_links_in_the_mail(
    factory: sessionmaker[Session], delivered: tuple[Settings, dict[str, EmailMessage]]
) -> None:
    settings, messages = delivered
    reader = _subscriber_id(factory, "reader@example.org")
    links = _rate_links(messages["reader@example.org"])
    more = links[2]
    assert more.endswith("/2/more") and links[3].endswith("/2/less")
    with Server(create_app(settings, factory)) as client:
        token = _confirm_form(client, more)
        assert feedback(factory, reader) == []  # the GET only asks, and says why it asks
        assert "link scanners open the links in a mail by themselves" in client.get(more).text
        said = client.post(more, data={"form": token, "action": "more"}, headers=FORM)
        assert said.status_code == 200 and "Noted: more like this." in said.text and "Undo" in said.text
        (rated,) = feedback(factory, reader)
        assert rated.verdict == "more"
        assert client.post(more, data={"form": token, "action": "more"}).status_code == 200
        assert len(feedback(factory, reader)) == 1  # the same verdict twice is one
        assert client.post(more, data={"form": token, "action": "less"}).status_code == 200
        assert [r.verdict for r in feedback(factory, reader)] == ["less"]
        # the web version shows it, with the undo button
        day_path = more.rsplit("/", 2)[0]
        page = client.get(day_path)
        assert page.status_code == 200 and "You asked for less like this." in page.text
        assert page.text.count(">More like this</button>") == len(links) // 2 - 1
        _, html = _parts(messages["reader@example.org"])
        manage = client.get(urlsplit(re.findall(r'href="([^"]+/m/[^"]+)"', html)[0]).path).text
        assert "Your library holds 2 papers, and you rated 1 entry of your digests (0 more like this, 1 less" in manage
        undone = client.post(more, data={"form": token, "action": "undo"})
        assert undone.status_code == 200 and "Undone." in undone.text
        assert feedback(factory, reader) == []
    # the entry rated is the digest's second one
    with factory() as session:
        (digest,) = [
            d for d in list_digests(session, subscriber_id=reader) if d.local_date == (DAY + timedelta(days=2)).date()
        ]
        second = digest_content(session, digest.id).items[1]
        entry = find_entry(session, second.key)
    assert entry is not None and rated.entry_id == entry.id


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"Origin": "https://evil.example"}, "token"),
        ({"Sec-Fetch-Site": "cross-site"}, "token"),
        ({}, "no token"),
        ({}, "another token"),
    ],
)
def test_a_forged_or_cross_site_rating_changes_nothing(
    factory: sessionmaker[Session],
    delivered: tuple[Settings, dict[str, EmailMessage]],
    headers: dict[str, str],
    body: str,
) -> None:
    settings, messages = delivered
    more = _rate_links(messages["reader@example.org"])[0]
    other = _rate_links(messages["plain@example.org"])[0]
    with Server(create_app(settings, factory)) as client:
        token = {"token": _confirm_form(client, more), "no token": "", "another token": _confirm_form(client, other)}
        response = client.post(more, data={"form": token[body], "action": "more"}, headers=headers)
    assert response.status_code == 403
    assert feedback(factory, _subscriber_id(factory, "reader@example.org")) == []


def test_what_a_rating_address_may_name(
    factory: sessionmaker[Session], delivered: tuple[Settings, dict[str, EmailMessage]]
) -> None:
    settings, messages = delivered
    more = _rate_links(messages["reader@example.org"])[0]
    base, day = more.rsplit("/", 3)[0], more.rsplit("/", 3)[1]
    wrong = [
        f"{base}/{day}/99/more",  # beyond the digest's entries
        f"{base}/{day}/0/more",
        f"{base}/{day}/01/more",
        f"{base}/{day}/1/maybe",
        f"{base}/{day}/1/MORE",
        f"{base}/2026-02-30/1/more",
        f"{base}/2001-01-01/1/more",  # a day without a digest
        f"{base}/{day}.bib/1/more",
        f"{base}x/{day}/1/more",  # an altered token
    ]
    with Server(create_app(settings, factory)) as client:
        for path in wrong:
            assert client.get(path).status_code == 404, path
            assert client.post(path, data={"action": "more"}).status_code == 404, path
        token = _confirm_form(client, more)
        stuffed = client.post(more, content=f"form={token}&action=more&pad=".encode() + b"x" * 5000, headers=FORM)
        assert stuffed.status_code == 413 and stuffed.headers["x-frame-options"] == "DENY"
        # an unsubscribed reader sees the page but records nothing
        assert (
            client.post(f"/u/{base.rsplit('/', 1)[1]}", content=b"List-Unsubscribe=One-Click", headers=FORM).status_code
            == 200
        )
        left = client.post(more, data={"form": token, "action": "more"})
        assert left.status_code == 409 and "unsubscribed" in left.text
        assert client.post(more, data={"form": token, "action": "sideways"}).status_code == 409
    assert feedback(factory, _subscriber_id(factory, "reader@example.org")) == []


_SEGMENT = st.text(st.characters(codec="utf-8"), max_size=12)


@pytest.mark.slow
def test_hostile_rating_requests_never_fail_or_record(
    factory: sessionmaker[Session], delivered: tuple[Settings, dict[str, EmailMessage]]
) -> None:
    """Any path segments where the day, number and verdict go, and any body, GET and
    POST: never a server error, and nothing recorded (no body has the form token)."""
    settings, messages = delivered
    more = _rate_links(messages["reader@example.org"])[0]

    with Server(create_app(settings, factory)) as client:

        @hsettings(max_examples=150, deadline=None)
        @given(segments=st.lists(_SEGMENT, min_size=1, max_size=3), body=st.binary(max_size=300))
        def hostile(segments: list[str], body: bytes) -> None:
            parts = more.split("/")
            for n, segment in enumerate(segments):
                parts[-1 - n] = quote(segment, safe="") or parts[-1 - n]
            path = "/".join(parts)
            for response in (
                client.get(path),
                client.post(path, content=body, headers=FORM),
                client.post(more, content=body, headers=FORM),
            ):
                assert response.status_code in (200, 400, 403, 404, 409, 413), (path, response.status_code)

        hostile()
    assert feedback(factory, _subscriber_id(factory, "reader@example.org")) == []


def test_top_picks_and_the_rating_links_are_in_the_mail(
    factory: sessionmaker[Session], delivered: tuple[Settings, dict[str, EmailMessage]]
) -> None:
    _, messages = delivered
    text, html = _parts(messages["reader@example.org"])
    assert "Top picks for you" in html and "Top picks for you" in text
    picks = re.search(r"Top picks for you</p>(.*?)</ol>", html, re.DOTALL)
    assert picks is not None
    titles = re.findall(r'href="#e(\d+)"', picks.group(1))
    reader = _subscriber_id(factory, "reader@example.org")
    with factory() as session:
        digest = max(list_digests(session, subscriber_id=reader), key=lambda d: d.local_date)
        items = digest_content(session, digest.id).items
    liked = [i for i in range(len(items)) if (items[i].taste or 0) > 0.1]  # above the default threshold
    best = sorted(liked, key=lambda i: -(items[i].taste or 0))[:3]
    assert 1 <= len(best) and [int(t) for t in titles] == [i + 1 for i in best]
    if best == list(range(len(best))):  # the model alone orders a `*` digest: the contents say it
        assert "Also in this digest" in html and "Also in this digest" in text
    assert all(item.taste is not None for item in items)
    assert "More like this: " + PUBLIC in text and "Less like this: " + PUBLIC in text
    plain_text, plain_html = _parts(messages["plain@example.org"])
    assert "Top picks" not in plain_html and "Top picks" not in plain_text  # no model, no picks
    assert "More like this" in plain_html  # but anyone can start one


def _reader_of_the_seeds(factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]) -> int:
    """A `*` subscriber, and every seed dump ingested at once; the subscriber's id."""
    _people(factory, _settings(tmp_path), ("reader@example.org", "*"))
    for path in seed_files:
        ingest_file(factory, path, now=DAY, rules=RULES)
    return _subscriber_id(factory, "reader@example.org")


def test_less_like_this_lowers_an_entry_and_undo_restores_it(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    reader = _reader_of_the_seeds(factory, tmp_path, seed_files)
    import_library(factory, reader, SNN_LIBRARY, DAY)
    assert refresh_models(factory, DAY).trained == 1
    supra = _entry_starting(factory, "SupraSNN")
    first = _score(factory, reader, supra)
    assert give_feedback(factory, reader, supra, "less", DAY)
    assert refresh_models(factory, DAY).trained == 1, "feedback retrains"
    lowered = _score(factory, reader, supra)
    assert lowered < first - 0.2, (first, lowered)
    assert give_feedback(factory, reader, supra, None, DAY)
    assert refresh_models(factory, DAY).trained == 1
    assert _score(factory, reader, supra) == pytest.approx(first, abs=1e-4)
    assert not give_feedback(factory, reader, supra, None, DAY), "nothing to undo"
    assert refresh_models(factory, DAY).trained == 0


def test_two_more_like_this_make_a_model_without_a_library(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    reader = _reader_of_the_seeds(factory, tmp_path, seed_files)
    give_feedback(factory, reader, _entry_starting(factory, "SupraSNN"), "more", DAY)
    give_feedback(factory, reader, _entry_starting(factory, "ReSCom"), "less", DAY)
    assert refresh_models(factory, DAY).trained == 0, "one positive is not a model"
    give_feedback(factory, reader, _entry_starting(factory, "ReSCom"), "more", DAY)
    assert refresh_models(factory, DAY).trained == 1
    with factory() as session:
        (model,) = session.scalars(select(TasteModel)).all()
    assert {title for title, _, _ in model.library} == {
        _title_starting(factory, "SupraSNN"),
        _title_starting(factory, "ReSCom"),
    }


def test_liked_and_the_threshold_choose_what_comes(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    settings = _settings(tmp_path)
    _people(
        factory,
        settings,
        ("liked@example.org", "liked"),
        ("picky@example.org", "liked"),
        ("nomodel@example.org", "liked"),
        ("both@example.org", "not gpu and liked"),
    )
    for email in ("liked@example.org", "picky@example.org", "both@example.org"):
        import_library(factory, _subscriber_id(factory, email), SNN_LIBRARY, DAY - timedelta(days=1))
    set_taste_threshold(factory, _subscriber_id(factory, "picky@example.org"), 4.5, DAY)  # beyond any entry
    for day, path in enumerate(seed_files):
        now = DAY + timedelta(days=day)
        ingest_file(factory, path, now=now, rules=RULES)
        plan(factory, settings, RULES, now=now, all_due=True)
    got = _entries_by_email(factory)
    liked = got["liked@example.org"]
    assert liked and all(taste is not None and taste > 0.1 for _, taste, _ in liked)  # the default threshold
    assert any(title.startswith("SupraSNN") for title, _, _ in liked)
    assert all(why.startswith("liked: your model's pick") for _, _, why in liked), liked[0]
    assert len(liked) < 40, "liked is a choice, not everything"
    assert got.get("picky@example.org", []) == [] and got.get("nomodel@example.org", []) == []
    both = got["both@example.org"]
    assert {t for t, _, _ in both} <= {t for t, _, _ in liked} and all("gpu" not in why for _, _, why in both)
    with pytest.raises(ValueError, match="threshold"):
        set_taste_threshold(factory, _subscriber_id(factory, "picky@example.org"), float("nan"), DAY)


def test_purge_deletes_feedback_and_export_gives_it_back(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    settings = _settings(tmp_path)
    _people(factory, settings, ("reader@example.org", "*"))
    reader = _subscriber_id(factory, "reader@example.org")
    ingest_file(factory, seed_files[2], now=DAY, rules=RULES)
    import_library(factory, reader, SNN_LIBRARY, DAY)
    give_feedback(factory, reader, _entry_starting(factory, "SupraSNN"), "more", DAY)
    give_feedback(factory, reader, _entry_starting(factory, "ReSCom"), "less", DAY)
    exported = csl_json(library(factory, reader), feedback(factory, reader)).encode()
    again = read_library(exported)
    assert again.problems == [] and len(again.papers) == 3  # two papers and the "more"; the "less" is left out
    assert _title_starting(factory, "SupraSNN") in {p.title for p in again.papers}
    _people(factory, settings, ("other@example.org", "*"))
    refresh_models(factory, DAY)
    plan(
        factory, settings, RULES, now=DAY + timedelta(hours=1), all_due=True
    )  # the reader's why lines name their papers
    other = _subscriber_id(factory, "other@example.org")
    with factory() as session:
        query = select(Digest.subscriber_id, Digest.body_key).where(Digest.entry_count > 0)
        bodies = {subscriber_id: key for subscriber_id, key in session.execute(query)}
        theirs = bodies[reader]
        assert theirs != bodies[other]
        assert any("snn" in why.lower() for why in session.scalars(select(BodyItem.why)))
    remove(factory, "reader@example.org", purge=True, now=DAY)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(Feedback)) == 0
        assert session.scalar(select(func.count()).select_from(LibraryPaperRow)) == 0
        kept = set(session.scalars(select(BodyItem.body_key)))
        assert theirs not in kept and kept == set(bodies.values()) - {theirs}  # the other reader's stays


def _entries_by_email(factory: sessionmaker[Session]) -> dict[str, list[tuple[str, float | None, str]]]:
    found: dict[str, list[tuple[str, float | None, str]]] = {}
    with factory() as session:
        for email, subscriber_id in session.execute(select(SubscriberRow.email, SubscriberRow.id)).all():
            for digest in list_digests(session, subscriber_id=subscriber_id):
                items = digest_content(session, digest.id).items if digest.entry_count else ()
                found.setdefault(email, []).extend((i.content.title, i.taste, i.why) for i in items)
    return found


def _entry_starting(factory: sessionmaker[Session], prefix: str) -> int:
    return _stored_starting(factory, prefix)[0]


def _title_starting(factory: sessionmaker[Session], prefix: str) -> str:
    return _stored_starting(factory, prefix)[1]


def _stored_starting(factory: sessionmaker[Session], prefix: str) -> tuple[int, str]:
    """The one stored entry whose title starts with *prefix*: its id and title."""
    from bot.store.schema import Entry

    with factory() as session:
        (found,) = session.execute(select(Entry.id, Entry.title).where(Entry.title.startswith(prefix))).all()
    return int(found[0]), str(found[1])


def _score(factory: sessionmaker[Session], subscriber_id: int, entry_id: int) -> float:
    from bot.store.entry_reads import entries_first_seen_between
    from bot.taste.ranking import TastePass

    with factory() as session:
        taste = TastePass.open(session)
        assert taste is not None
        model = taste.models(session, [subscriber_id])[subscriber_id]
        window = [e for e in entries_first_seen_between(session, None, DAY + timedelta(days=30))]
        return taste.reader(model, None, sorted(window, key=lambda e: e.id)).score_of(entry_id)


def test_a_library_uploaded_and_a_threshold_set_on_the_manage_page(
    factory: sessionmaker[Session], delivered: tuple[Settings, dict[str, EmailMessage]]
) -> None:
    settings, messages = delivered
    plain = _subscriber_id(factory, "plain@example.org")
    _, html = _parts(messages["plain@example.org"])
    manage = urlsplit(re.findall(r'href="([^"]+/m/[^"]+)"', html)[0]).path
    broken = SNN_LIBRARY + b"\n@article{broken, title = {Unclosed\n"
    with Server(create_app(settings, factory)) as client:
        client.timeout = httpx.Timeout(READ_SECONDS + 10)  # the reader yields to all other work: a busy run waits
        token = _confirm_form(client, manage)
        # The upload posts multipart/form-data to the page itself, its form token in the
        # address: checked before a byte of the file is read.
        upload = f"{manage}?form={token}"
        page = client.get(manage).text
        assert f'action="?form={token}"' in page
        assert "Ranked by your taste" in page and "0 papers" in page and "Add two papers" in page
        added = client.post(upload, data={"form": token}, files={"library": ("my.bib", broken, "text/x-bibtex")})
        assert added.status_code == 200, added.text
        assert "Added 2 papers to your library" in added.text and "1 record could not be read (line " in added.text
        assert len(library(factory, plain)) == 2
        again = client.post(upload, data={"form": token}, files={"library": ("my.bib", SNN_LIBRARY)})
        assert "Added 0 papers" in again.text and "2 were there already" in again.text
        refused = [
            client.post(upload, data={"form": token}, files={"library": ("x.bin", b"\xff\xfe\x00")}),
            client.post(upload, data={"form": token}, files={"library": ("empty.bib", b"")}),
            client.post(upload, data={"form": token}),
        ]
        assert [r.status_code for r in refused] == [400, 400, 400]
        assert "That file cannot be read: not UTF-8 text (byte 0)." in refused[0].text
        big = b"%" * 5_000_001
        assert client.post(upload, data={"form": token}, files={"library": ("big.bib", big)}).status_code == 413
        forged = [
            client.post(f"{manage}?form={'0' * 32}", data={"form": token}, files={"library": ("my.bib", b"24\n")}),
            client.post(manage, data={"form": token}, files={"library": ("my.bib", b"2401.00001\n")}),
            client.post(
                upload,
                data={"form": token},
                files={"library": ("my.bib", b"2401.00001\n")},
                headers={"Origin": "https://evil.example"},
            ),
        ]
        assert [r.status_code for r in forged] == [403, 403, 403]
        # the `liked` threshold, from the same section
        saved = client.post(manage, data={"form": token, "action": "threshold", "threshold": "0.35"}, headers=FORM)
        assert saved.status_code == 200 and "Saved: liked means a taste score above 0.35." in saved.text
        assert 'name="threshold" step="0.05" min="-5" max="5" value="0.35"' in saved.text
        for bad in ("", "abc", "nan", "1e400", "6", "0.3; drop table", "0.3" + "0" * 40 + "1x", "9" * 5000):
            refused_value = client.post(manage, data={"form": token, "action": "threshold", "threshold": bad})
            assert refused_value.status_code == 400 and "must be a number from -5 to 5" in refused_value.text, bad
        assert client.post(manage, data={"action": "threshold", "threshold": "1"}).status_code == 403
    with factory() as session:
        assert session.get(SubscriberRow, plain).taste_threshold == pytest.approx(0.35)  # type: ignore[union-attr]
    assert len(library(factory, plain)) == 2
    assert "Traceback" not in "".join(r.text for r in refused + forged)


def test_without_the_taste_extra_the_page_keeps_a_library_and_says_nothing_is_ranked(
    factory: sessionmaker[Session], delivered: tuple[Settings, dict[str, EmailMessage]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *more: None if name in ("numpy", "scipy", "sklearn") else found(name)
    )
    settings, messages = delivered
    plain = _subscriber_id(factory, "plain@example.org")
    manage = urlsplit(re.findall(r'href="([^"]+/m/[^"]+)"', _parts(messages["plain@example.org"])[1])[0]).path
    with Server(create_app(settings, factory)) as client:
        client.timeout = httpx.Timeout(READ_SECONDS + 10)  # the reader yields to all other work: a busy run waits
        token = _confirm_form(client, manage)
        added = client.post(
            f"{manage}?form={token}", data={"form": token}, files={"library": ("my.bib", SNN_LIBRARY, "text/x-bibtex")}
        )
        assert added.status_code == 200, added.text
        assert "Added 2 papers to your library" in added.text
        assert "This site does not rank digests by a library yet: it is kept for when it does." in added.text
        assert "its operator has not installed that part" in added.text
        assert "ranked by it from the next one on" not in added.text
    assert len(library(factory, plain)) == 2
    with factory() as session:  # nothing was trained for them
        assert session.scalar(select(func.count()).where(TasteModel.subscriber_id == plain)) == 0


def test_the_commands_show_scores_feedback_and_the_threshold(tmp_path: Path, seed_files: list[Path]) -> None:
    import os

    from bot.store.engine import make_engine, sessions

    env = {**os.environ, "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"), "COLUMNS": "250"}

    run = Cli(tmp_path, env, columns=250, placed=False)

    def cli(*args: str) -> CliResult:
        return run(*args, code=None)

    assert cli("subscribers", "add", "ada@example.org", "--filter", "*", "--backfill", "all").returncode == 0
    for path in seed_files:
        assert cli("dumps", "ingest", str(path)).returncode == 0
    (tmp_path / "snn.bib").write_bytes(SNN_LIBRARY)
    assert cli("subscribers", "library", "add", "ada@example.org", "snn.bib").returncode == 0
    preview = cli("preview", "ada@example.org")
    assert preview.returncode == 0, preview.stderr
    assert " taste " in preview.stdout and "ranked by their model: score + 3 x taste" in preview.stdout
    lines = [json.loads(line) for line in cli("preview", "ada@example.org", "--json").stdout.splitlines()]
    assert lines[0]["title"].startswith(("ReSCom", "SupraSNN")) and lines[0]["taste"] > 0.1
    assert lines[0]["why"].startswith("close to: '")
    assert [line["taste"] for line in lines] == sorted((line["taste"] for line in lines), reverse=True)
    tested = cli("tags", "test", "liked", "--subscriber", "ada@example.org", "--json")
    assert tested.returncode == 0 and {json.loads(line)["title"][:6] for line in tested.stdout.splitlines()} >= {
        "ReSCom",
        "SupraS",
    }
    alone = cli("tags", "test", "liked")
    assert (
        "liked: 0 entries" in alone.stdout and "'liked' matches nothing here: give --subscriber EMAIL" in alone.stderr
    )
    assert cli("subscribers", "library", "threshold", "ada@example.org").stdout.strip() == (
        "ada@example.org: liked above a taste score of 0.10"
    )
    assert cli("subscribers", "library", "threshold", "ada@example.org", "0.3").returncode == 0
    for bad in ("nan", "99", "-inf"):
        refused = cli("subscribers", "library", "threshold", "ada@example.org", "--", bad)
        assert refused.returncode == 2 and refused.stderr.strip().startswith("error: threshold: "), refused.stderr
    engine = make_engine(f"sqlite:///{tmp_path / 'var' / 'digestbot.sqlite3'}")
    factory = sessions(engine)
    give_feedback(factory, _subscriber_id(factory, "ada@example.org"), _entry_starting(factory, "ReSCom"), "less", DAY)
    engine.dispose()
    rated = [
        json.loads(line)
        for line in cli("subscribers", "library", "feedback", "ada@example.org", "--json").stdout.splitlines()
    ]
    assert [(r["verdict"], r["title"][:6], r["interest"]) for r in rated] == [("less", "ReSCom", "")]
    exported = json.loads(cli("subscribers", "export", "--library", "ada@example.org").stdout)
    assert [i.get("note") for i in exported][-1] == "digestbot feedback: less like this" and len(exported) == 3
    all_output = preview.stderr + tested.stderr + alone.stderr
    assert "Traceback" not in all_output


def test_an_entry_liked_later_still_arrives(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    """`liked` can change its verdict on an entry already weighed (feedback, a new
    threshold): the planner reads such a subscriber's whole window, not from a watermark."""
    settings = _settings(tmp_path)
    _people(factory, settings, ("liked@example.org", "liked"))
    reader = _subscriber_id(factory, "liked@example.org")
    import_library(factory, reader, SNN_LIBRARY, DAY - timedelta(days=1))
    for day, path in enumerate(seed_files[:3]):
        ingest_file(factory, path, now=DAY + timedelta(days=day), rules=RULES)
        plan(factory, settings, RULES, now=DAY + timedelta(days=day), all_due=True)
    before = {title for title, _, _ in _entries_by_email(factory).get("liked@example.org", [])}
    set_taste_threshold(factory, reader, -5.0, DAY + timedelta(days=2))  # now every entry is liked
    plan(factory, settings, RULES, now=DAY + timedelta(days=3), all_due=True)
    after = [title for title, _, _ in _entries_by_email(factory)["liked@example.org"]]
    with factory() as session:
        from bot.store.schema import Entry

        stored = set(session.scalars(select(Entry.title)))
    assert len(after) == len(set(after)), "nothing twice"
    assert set(after) == stored and before < stored, "every entry of the window, once"


def test_the_next_digest_on_the_manage_page_is_in_the_models_order(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    """What "Your next digest" lists is what `preview` lists: the model's order and why
    lines, and `liked` as the subscriber's model says."""
    from bot.plan.next_digest import outlook
    from bot.store.subscribers import get_subscriber

    reader = _reader_of_the_seeds(factory, tmp_path, seed_files)
    _people(factory, _settings(tmp_path), ("liked@example.org", "liked"))
    import_library(factory, reader, SNN_LIBRARY, DAY)
    import_library(factory, _subscriber_id(factory, "liked@example.org"), SNN_LIBRARY, DAY)
    refresh_models(factory, DAY)
    with factory() as session:
        star, liking = get_subscriber(session, "reader@example.org"), get_subscriber(session, "liked@example.org")
        assert star is not None and liking is not None
        everything = outlook(session, star, RULES, as_of=DAY + timedelta(hours=1), first=2)
        picked = outlook(session, liking, RULES, as_of=DAY + timedelta(hours=1), first=5)
    assert {title[:6] for title, _ in everything.first} == {"ReSCom", "SupraS"}
    assert all(why.startswith("close to: '") for _, why in everything.first)
    assert 2 <= picked.matching < everything.matching and all(why.startswith("liked: ") for _, why in picked.first)


_BOUNDARY = "b0undary"


@given(
    content_type=st.sampled_from(
        [
            f"multipart/form-data; boundary={_BOUNDARY}",
            "multipart/form-data",
            "multipart/form-data; boundary=",
            "text/plain",
        ]
    ),
    parts=st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=200)), max_size=5),
    junk=st.binary(max_size=300),
)
def test_any_upload_body_is_read_or_ignored_never_an_error(
    content_type: str, parts: list[tuple[str, bytes]], junk: bytes
) -> None:
    """The manage page's upload parser on made-up multipart bodies: fields and a file, or
    nothing, and never an exception."""
    from bot.web.forms import form_with_file

    body = b"".join(
        f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"; filename="x"\r\n\r\n'.encode(
            "utf-8", "replace"
        )
        + data
        + b"\r\n"
        for name, data in parts
    )
    for sent in (body + f"--{_BOUNDARY}--\r\n".encode(), junk, body + junk):
        fields, data = form_with_file(content_type, sent, "library")
        assert isinstance(fields, dict) and (data is None or isinstance(data, bytes))


def test_an_uploaded_file_arrives_byte_for_byte() -> None:
    from bot.web.forms import form_with_file

    data = b"2401.00001\n\xff\x00 not text\r\n"
    body = (
        (
            f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="form"\r\n\r\nabc\r\n'
            f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="library"; filename="l.bib"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{_BOUNDARY}--\r\n".encode()
    )
    assert form_with_file(f"multipart/form-data; boundary={_BOUNDARY}", body, "library") == ({"form": "abc"}, data)
