"""The manage page through a real uvicorn server and httpx: tags or a filter, cadence,
time zone and send hour in one form, validated as the CLI validates them (an error is
shown and nothing changes), the unsubscribe button, and the next digest's preview.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import Subscriber, SubscriberStatus
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tokens import make_token, signing_key
from bot.unsubscribes import journal_of
from bot.web import create_app
from tests.conftest import ROOT
from tests.helpers import Server, settings_for

NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)
RULES = load_rules(ROOT / "config" / "tags.toml")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_for(tmp_path, web={"public_url": "https://digest.example.org", "signing_key": "m" * 32})


@pytest.fixture
def ada(factory: sessionmaker[Session], settings: Settings) -> str:
    """The manage page's path of an active subscriber whose filter is one tag."""
    save(factory, settings, [clean_fields("ada@example.org", filter="gpu", timezone="UTC", send_hour=8)], NOW)
    with factory() as session:
        found = get_subscriber(session, "ada@example.org")
    assert found is not None
    return f"/m/{make_token(signing_key(settings), found.id, found.unsubscribe_secret)}"


@pytest.fixture
def web(factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]) -> Iterator[httpx.Client]:
    ingest_file(factory, seed_files[0], now=NOW, rules=RULES)
    with Server(create_app(settings, factory, clock=lambda: NOW)) as client:
        yield client


def stored(factory: sessionmaker[Session]) -> Subscriber:
    journal_of(factory).apply_pending(factory)
    with factory() as session:
        found = get_subscriber(session, "ada@example.org")
    assert found is not None
    return found


def save_form(web: httpx.Client, path: str, **fields: str | list[str]) -> httpx.Response:
    page = web.get(path)
    token = re.search(r'name="form" value="([^"]+)"', page.text)
    assert token
    data: dict[str, str | list[str]] = {
        "form": token.group(1),
        "action": "settings",
        "tag": ["gpu"],
        "filter": "",
        "cadence": "daily",
        "timezone": "UTC",
        "send_hour": "8",
    }
    data.update(fields)
    return web.post(path, data=data)


def test_tags_cadence_zone_and_hour_are_saved_together(
    web: httpx.Client, ada: str, factory: sessionmaker[Session]
) -> None:
    page = web.get(ada)
    assert re.search(r'value="gpu" checked> gpu', page.text)  # a one-tag filter shows as a ticked box
    assert re.search(r'id="filter" name="filter" value=""', page.text)
    saved = save_form(web, ada, tag=["gpu", "llm"], cadence="weekly:fri", timezone="Asia/Kolkata", send_hour="6")
    assert saved.status_code == 200 and "Saved." in saved.text
    ada_now = stored(factory)
    assert (ada_now.filter, ada_now.cadence, ada_now.timezone, ada_now.send_hour) == (
        "gpu or llm",
        "weekly:fri",
        "Asia/Kolkata",
        6,
    )
    assert '<option value="weekly:fri" selected>every Friday</option>' in saved.text
    assert (
        '<optgroup label="Asia">' in saved.text
        and '<option value="Asia/Kolkata" selected>Kolkata</option>' in saved.text
    )
    assert re.search(r"Goes out Friday \d\d June, 06:00 \(Asia/Kolkata\)", saved.text), saved.text
    # Issue 48, item 11: a legacy name is taken, and stored as the zone it names.
    legacy = save_form(web, ada, tag=["gpu"], cadence="feed", timezone="Asia/Calcutta", send_hour="6")
    assert legacy.status_code == 200 and '<option value="Asia/Kolkata" selected>Kolkata</option>' in legacy.text
    assert "Asia/Calcutta" not in legacy.text and "US/Pacific" not in legacy.text and "Europe/Kiev" not in legacy.text
    # Issue 48, item 10: the feed cadence says where it goes.
    assert (
        re.search(r"Goes into your feed Friday \d\d June, 06:00", legacy.text) or "Goes into your feed" in legacy.text
    )
    assert "Goes out" not in legacy.text


def test_the_advanced_filter_wins_and_shows_in_its_box(
    web: httpx.Client, ada: str, factory: sessionmaker[Session]
) -> None:
    saved = save_form(web, ada, tag=["llm"], filter='gpu and not "sparse attention"')
    assert saved.status_code == 200
    assert stored(factory).filter == 'gpu and not "sparse attention"'
    page = web.get(ada)
    assert 'value="gpu and not &#34;sparse attention&#34;"' in page.text
    assert not re.search(r'name="tag" value="[^"]+" checked', page.text)


BAD = [
    ({"tag": [], "filter": ""}, "filter: tick at least one tag"),
    ({"filter": "gpu and"}, "filter:"),
    ({"filter": "x" * 2001}, "longer than 2000 characters"),
    ({"cadence": "fortnightly"}, "cadence:"),
    ({"timezone": "Europe/Atlantis"}, "timezone:"),
    ({"send_hour": "-1"}, "send_hour:"),
    ({"tag": ["not"]}, "is not a tag"),
]


@pytest.mark.parametrize(("bad", "said"), BAD, ids=[b[1][:20] for b in BAD])
def test_a_bad_value_is_shown_and_nothing_changes(
    web: httpx.Client, ada: str, factory: sessionmaker[Session], bad: dict[str, str], said: str
) -> None:
    before = stored(factory)
    answer = save_form(web, ada, **{"cadence": "weekdays", "send_hour": "9", **bad})
    assert answer.status_code == 400 and said in answer.text
    assert stored(factory) == before
    # The form keeps what they chose, to fix the one field.
    if "cadence" not in bad:
        assert '<option value="weekdays" selected>' in answer.text
    if "send_hour" not in bad:
        assert '<option value="9" selected>' in answer.text


def test_the_unsubscribe_button_unsubscribes(web: httpx.Client, ada: str, factory: sessionmaker[Session]) -> None:
    page = web.get(ada)
    button = re.search(r'<form method="post" action="/u/([^"]+)">', page.text)
    assert button is not None
    done = web.post(f"/u/{button.group(1)}", data={"List-Unsubscribe": "One-Click"})
    assert done.status_code == 200 and "You are unsubscribed" in done.text
    assert stored(factory).status is SubscriberStatus.UNSUBSCRIBED


def test_the_preview_lists_what_is_waiting_or_says_why_nothing_is(
    web: httpx.Client, ada: str, factory: sessionmaker[Session]
) -> None:
    page = web.get(ada)
    assert "Your next digest" in page.text
    items = re.findall(r'<li>([^<]+) <span class="muted">\((.+?)\)</span></li>', page.text)
    assert items and all("gpu" in why for _, why in items), page.text.split("Your next digest")[1][:1500]
    assert "new entries match your filter" in page.text or "new entry matches your filter" in page.text
    quiet = save_form(web, ada, tag=[], filter='"no paper says this"')
    assert "none matches your filter" in quiet.text and "<li>" not in quiet.text.split("Your next digest")[1]


def test_a_form_token_of_any_text_is_refused_not_a_server_error(
    web: httpx.Client, ada: str, factory: sessionmaker[Session]
) -> None:
    before = stored(factory)
    for token in ["é", "\u202e", "x" * 40, ""]:
        answer = web.post(ada, data={"form": token, "action": "pause"})
        assert answer.status_code == 403, (token, answer.status_code)
    assert stored(factory) == before


def test_everything_is_a_box_of_its_own(web: httpx.Client, ada: str, factory: sessionmaker[Session]) -> None:
    saved = save_form(web, ada, tag=["*", "gpu"])
    assert saved.status_code == 200 and stored(factory).filter == "*"
    assert (
        re.search(r'value="\*" checked> everything', saved.text) and 'id="filter" name="filter" value=""' in saved.text
    )


def test_after_a_send_now_the_page_promises_no_digest_it_will_not_send(
    factory: sessionmaker[Session], settings: Settings, seed_files: list[Path], ada: str
) -> None:
    """Everything that matched went out by hand: the page says nothing waits, and gives no
    send time (it said "Goes out now" beside "No email")."""
    import asyncio

    from bot.delivery.loop import deliver_now
    from bot.domain import DigestKind
    from bot.plan import plan
    from bot.tools.sink import Sink, SinkHandler

    for path in seed_files:
        ingest_file(factory, path, now=NOW, rules=RULES)
    with Sink(SinkHandler()) as sink:
        sending = settings.model_copy(update={"smtp": settings.smtp.model_copy(update={"port": sink.port})})
        plan(factory, sending, RULES, now=NOW, subscribers=[stored(factory)], kind=DigestKind.MANUAL)
        asyncio.run(deliver_now(factory, Parts(sending), clock=lambda: NOW))
        assert len(sink.received) == 1
    with Server(create_app(settings, factory, clock=lambda: NOW)) as web:
        preview = web.get(ada).text.split("Your next digest")[1].split("</section>")[0]
    assert "none matches your filter" in preview and "you were not sent" in preview
    assert "Goes out" not in preview, preview
    # Moments after a digest, "No email: ..." read like an address missing.
    assert "Nothing for your next digest yet" in preview and "No email" not in preview
