"""Every page the endpoint serves, in each of its states, and every kind of digest pass
the Nu HTML Checker (vnu, from npm's ``vnu-jar``) with no error.

The pages are the bytes the real endpoint answers (through uvicorn and httpx), the
digests those the real delivery sends to the test SMTP sink; vnu runs once over all.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tokens import make_token, signing_key
from bot.tools.inbox_index import write_index
from bot.tools.sink import Sink
from bot.web import create_app
from tests.browser import vnu_errors, vnu_missing
from tests.conftest import ROOT, SEEDS
from tests.helpers import Clock, Server, rich_digest, settings_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(vnu_missing() is not None, reason=str(vnu_missing())),
]
RULES = load_rules(ROOT / "config" / "tags.toml")
NOW = datetime(2026, 6, 15, 12, tzinfo=UTC)


@pytest.fixture
def settings(tmp_path: Path, sink: Sink) -> Settings:
    web = {"signing_key": "v" * 32, "signup": True, "signups_per_hour": 3}
    return settings_for(tmp_path, site=True, smtp_port=sink.port, web=web, digest={"top_picks": 3})


def _form(page: httpx.Response, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


@pytest.fixture
def pages(factory: sessionmaker[Session], settings: Settings, sink: Sink, tmp_path: Path) -> Iterator[dict[str, bytes]]:
    """name -> the bytes served, for every view of the page template and every digest."""
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, now=NOW - timedelta(days=1), rules=RULES)
    people = [clean_fields("ada@example.org"), clean_fields("grace@example.org", filter="gpu and llm")]
    save(factory, settings, people, NOW - timedelta(days=2))
    plan(factory, settings, RULES, now=NOW, all_due=True)
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: NOW))
    found: dict[str, bytes] = {}
    for n, received in enumerate(sink.received):
        html = received.message.get_body(("html",))
        assert html is not None
        found[f"digest {n} to {received.recipients[0]}"] = html.get_content().encode()
    mailed, web = rich_digest()
    found |= {"rich digest": mailed.encode(), "rich web version": web.encode()}
    in_sections, in_sections_web = rich_digest(sections=True)
    found |= {"digest in sections": in_sections.encode(), "web version in sections": in_sections_web.encode()}
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for n, received in enumerate(sink.received, start=1):
        (inbox / f"{n:04d}.eml").write_bytes(received.data)
    found["the sink's inbox index"] = write_index(inbox).read_bytes()

    key = signing_key(settings)
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
    assert ada is not None
    token = make_token(key, ada.id, ada.unsubscribe_secret)
    clock = Clock(NOW)
    with Server(create_app(settings, factory, clock=clock)) as web_client:
        get, post = web_client.get, web_client.post
        manage = f"/m/{token}"
        to_ada = next(data for name, data in found.items() if name.endswith("to ada@example.org"))
        day = re.search(r"/d/[^/]+/(\d{4}-\d\d-\d\d)", to_ada.decode())
        assert day is not None
        version = f"/d/{token}/{day.group(1)}"
        form = _form(get(manage), "form")
        signup = get("/subscribe")
        fields = {"tag": "gpu", "cadence": "daily", "timezone": "UTC", "send_hour": "8"}

        def sign_up(email: str, **headers: str) -> httpx.Response:
            csrf = _form(get("/subscribe"), "csrf")  # each answer sets a new cookie
            return post("/subscribe", data={**fields, "csrf": csrf, "email": email}, headers=headers)

        responses = {
            "sign-up page": signup,
            "sign-up with an error": sign_up("not an address"),
            "sign-up sent": sign_up("new@example.org"),
            "another sign-up": sign_up("late@example.org"),
            "sign-up refused": sign_up("x@example.org", **{"Sec-Fetch-Site": "cross-site"}),
            "not found": get("/u/1.AAAAAAAAAAAAAAAAAAAAAAAA"),
            "unsubscribe page": get(f"/u/{token}"),
            "manage page": get(manage),
            "manage page with an error": post(manage, data={"form": form, "action": "filter", "filter": "gpu and ("}),
            "manage page saved": post(manage, data={"form": form, "action": "filter", "filter": "(gpu and llm) or x"}),
            "manage page paused": post(manage, data={"form": form, "action": "pause"}),
            "manage page refused": post(manage, data={"form": "0" * 32, "action": "pause"}),
            "web version": get(version),
            "rating page": get(f"{version}/1/more"),
            "rating page, rated": post(f"{version}/1/less", data={"form": form, "action": "less"}),
            "web version after a rating": get(version),
            "unsubscribed": post(f"/u/{token}", data={"List-Unsubscribe": "One-Click"}),
        }
        responses["manage page, unsubscribed"] = get(manage)
        link, late = (_confirmation_link(sink, email) for email in ("new@example.org", "late@example.org"))
        responses["confirmation page"] = get(link)
        responses["confirmed"] = post(link, data={"form": _form(responses["confirmation page"], "form")})
        for n in range(4):
            responses["too many sign-ups"] = sign_up(f"n{n}@example.org")
        assert responses["too many sign-ups"].status_code == 429
        clock.now = NOW + timedelta(days=30)
        responses["expired confirmation"] = get(late)
        assert responses["expired confirmation"].status_code == 410
    found |= {name: response.content for name, response in responses.items()}
    yield found


def _confirmation_link(sink: Sink, email: str) -> str:
    """The path of the link in the sign-up mail to *email* (sent after the answer)."""
    import time

    deadline = time.monotonic() + 10
    while not (mails := [r for r in sink.received if email in r.recipients]):
        assert time.monotonic() < deadline, f"no sign-up mail to {email}"
        time.sleep(0.02)
    body = mails[0].message.get_body(("plain",))
    assert body is not None
    found = re.search(r"http://digest\.example\.org(/c/\S+)", body.get_content())
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_every_page_and_digest_is_valid_html(pages: dict[str, bytes], tmp_path: Path) -> None:
    assert len(pages) >= 25
    # Issue 48, item 12: each page names itself and the list in its title (a tab, a bookmark).
    titles = {name: re.search(rb"<title>([^<]*)</title>", page) for name, page in pages.items()}
    plain = [name for name, found in titles.items() if found is None or found.group(1).strip() in (b"", b"digestbot")]
    assert plain == [], plain
    assert len({found.group(1) for found in titles.values() if found}) >= 10
    errors = vnu_errors(pages, tmp_path / "checked")
    assert errors == [], "\n".join(errors)


def test_the_pages_of_a_server_error_and_a_busy_store_are_valid_html(tmp_path: Path) -> None:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    pages = Environment(
        loader=FileSystemLoader(str(ROOT / "templates" / "web")), autoescape=select_autoescape(["html.j2"])
    )
    rendered = {
        page: pages.get_template(f"{page}.html.j2").render(list_name="Research Digest", token="", signup=False).encode()
        for page in ("error", "busy")
    }
    assert vnu_errors(rendered, tmp_path / "checked") == []
