"""The subscriber endpoint through a real uvicorn server on 127.0.0.1, with httpx:
RFC 8058 one-click unsubscribe, a GET that never unsubscribes, the manage page,
and one neutral 404 for unknown, forged and altered tokens.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email import policy
from email.parser import BytesParser
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.domain import SubscriberStatus
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tokens import make_token, signing_key
from bot.tools.sink import Sink, SinkHandler, free_port
from bot.unsubscribes import journal_of
from bot.web import create_app
from tests.conftest import ROOT
from tests.helpers import DIGESTBOT, Server, settings_for, wait_until_serving

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)
KEY = "k" * 32


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_for(tmp_path, site=True, web={"public_url": "https://digest.example.org", "signing_key": KEY})


@pytest.fixture
def people(factory: sessionmaker[Session], settings: Settings) -> dict[str, str]:
    """email -> token for two subscribers."""
    save(factory, settings, [clean_fields("ada@example.org", filter="gpu"), clean_fields("bob@example.org")], DAY)
    key = signing_key(settings)
    with factory() as session:
        found = {email: get_subscriber(session, email) for email in ("ada@example.org", "bob@example.org")}
    return {email: make_token(key, s.id, s.unsubscribe_secret) for email, s in found.items() if s is not None}


@pytest.fixture
def web(factory: sessionmaker[Session], settings: Settings) -> Iterator[httpx.Client]:
    with Server(create_app(settings, factory)) as client:
        yield client


def status_of(factory: sessionmaker[Session], email: str) -> SubscriberStatus:
    """The stored status once every acknowledged unsubscribe is applied (the endpoint
    applies them in the background; ``test_an_acknowledged_unsubscribe_is_applied`` waits for that)."""
    journal_of(factory).apply_pending(factory)
    with factory() as session:
        found = get_subscriber(session, email)
        assert found is not None
        return found.status


ONE_CLICK = {"content-type": "application/x-www-form-urlencoded"}


def test_get_shows_a_confirm_page_and_never_unsubscribes(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session]
) -> None:
    for _ in range(3):  # link scanners fetch more than once
        page = web.get(f"/u/{people['ada@example.org']}")
        assert page.status_code == 200
        assert 'name="List-Unsubscribe" value="One-Click"' in page.text and "ada@example.org" in page.text
    # Why a second click: in a line, on the page that asks for it.
    assert "link scanners open the links in a mail by themselves" in page.text
    assert web.head(f"/u/{people['ada@example.org']}").status_code == 200
    assert status_of(factory, "ada@example.org") is SubscriberStatus.ACTIVE
    assert page.headers["referrer-policy"] == "same-origin" and page.headers["cache-control"] == "no-store"
    assert "default-src 'none'" in page.headers["content-security-policy"]


def test_one_click_post_unsubscribes_only_that_subscriber(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session]
) -> None:
    response = web.post(f"/u/{people['ada@example.org']}", content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK)
    assert response.status_code == 200 and "You are unsubscribed" in response.text
    assert status_of(factory, "ada@example.org") is SubscriberStatus.UNSUBSCRIBED
    assert status_of(factory, "bob@example.org") is SubscriberStatus.ACTIVE
    again = web.post(f"/u/{people['ada@example.org']}", content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK)
    assert again.status_code == 200  # idempotent
    assert web.post(f"/u/{people['bob@example.org']}", content=b"something=else", headers=ONE_CLICK).status_code == 400
    assert status_of(factory, "bob@example.org") is SubscriberStatus.ACTIVE


def _forgeries(token: str) -> list[str]:
    ident, signature = token.split(".")
    flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    return [
        flipped,  # altered signature
        f"{int(ident) + 1}.{signature}",  # the right signature moved to another subscriber
        f"{ident}.{'A' * len(signature)}",  # forged
        f"999999.{signature}",  # unknown subscriber
        ident,  # truncated
        f"{ident}.{signature}x",
        f"-1.{signature}",
        f"{ident}.{signature[:-2]}%00%00",
        "../../etc/passwd",
        "",
    ]


@pytest.mark.parametrize("path", ["/u/{}", "/m/{}"])
def test_forged_altered_and_unknown_tokens_get_the_same_404(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session], path: str
) -> None:
    token = people["ada@example.org"]
    reference = web.get(path.format(f"999999.{'B' * 24}"))
    assert reference.status_code == 404
    for forged in _forgeries(token):
        for method in ("GET", "POST"):
            response = web.request(
                method, path.format(forged), content=b"List-Unsubscribe=One-Click&action=pause", headers=ONE_CLICK
            )
            assert response.status_code == 404, (forged, method)
            assert response.text == reference.text, forged
    assert web.get("/nothing/here").text == reference.text
    assert status_of(factory, "ada@example.org") is SubscriberStatus.ACTIVE
    assert status_of(factory, "bob@example.org") is SubscriberStatus.ACTIVE


def test_every_page_under_a_token_answers_a_forged_one_with_the_same_404(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session], settings: Settings
) -> None:
    """Each route with a token in its path, read from the app itself, so a page added
    later is checked with no edit here."""
    values = {"day": "2026-06-14", "ref": "1", "verdict": "more"}
    paths = [
        route.path.replace("{token}", "TOKEN").format(**values)
        for route in create_app(settings, factory).routes
        if "{token}" in getattr(route, "path", "")
    ]
    assert len(paths) >= 7
    reference = web.get(f"/u/999999.{'B' * 24}")
    forged = people["ada@example.org"][:-2] + "AA"
    for path in paths:
        for method in ("GET", "POST"):
            response = web.request(method, path.replace("TOKEN", forged), content=b"x=1", headers=ONE_CLICK)
            assert (response.status_code, response.text) == (404, reference.text), (method, path)


def test_a_token_from_another_key_is_refused(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session]
) -> None:
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
    assert ada is not None
    other = make_token(b"another key, 32 characters long!", ada.id, ada.unsubscribe_secret)
    assert web.post(f"/u/{other}", content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK).status_code == 404
    assert status_of(factory, "ada@example.org") is SubscriberStatus.ACTIVE


def test_manage_page_pauses_resumes_and_edits_the_filter(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session]
) -> None:
    url = f"/m/{people['ada@example.org']}"
    page = web.get(url)
    assert page.status_code == 200 and 'value="gpu"' in page.text and "Pause digests" in page.text
    form = form_token_of(page.text)
    assert web.post(url, data={"form": form, "action": "pause"}).status_code == 200
    assert status_of(factory, "ada@example.org") is SubscriberStatus.PAUSED
    assert web.post(url, data={"form": form, "action": "pause"}).status_code == 400  # already paused
    assert web.post(url, data={"form": form, "action": "resume"}).status_code == 200
    assert status_of(factory, "ada@example.org") is SubscriberStatus.ACTIVE

    saved = web.post(
        url, data={"form": form, "action": "filter", "filter": '(GPU or fpga) and not  "sparse attention"'}
    )
    assert saved.status_code == 200 and "Filter saved" in saved.text and "Note:" not in saved.text
    typo = web.post(url, data={"form": form, "action": "filter", "filter": "gpuu or fpga"})
    assert typo.status_code == 200 and "Filter saved" in typo.text  # saved, with a note on the typo
    assert "Note: no entry has the tag &#39;gpuu&#39; (did you mean gpu?)" in typo.text
    saved = web.post(
        url, data={"form": form, "action": "filter", "filter": '(GPU or fpga) and not  "sparse attention"'}
    )
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
        assert ada is not None and ada.filter == '(gpu or fpga) and not "sparse attention"'

    for bad in ("gpu and", "gpu\r\nBcc: x@y.z", "(" * 300, "<script>alert(1)</script>", "not " * 499 + "gpu"):
        refused = web.post(url, data={"form": form, "action": "filter", "filter": bad})
        assert refused.status_code == 400, bad
        assert "filter:" in refused.text and "<script>" not in refused.text
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
        assert ada is not None and ada.filter == '(gpu or fpga) and not "sparse attention"'


def form_token_of(page: str) -> str:
    found = re.search(r'name="form" value="([0-9a-f]+)"', page)
    assert found is not None, page
    return found.group(1)


CROSS_SITE = [
    ({"Origin": "https://evil.example"}, "urlencoded"),
    ({"Origin": "null", "Content-Type": "text/plain"}, "text"),
    # "Our origin" is web.public_url's, never one built from the Host header.
    ({"Host": "evil.example", "Origin": "http://evil.example"}, "urlencoded"),
    ({"Host": "evil.example", "Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"}, "urlencoded"),
    ({"Origin": "null", "Sec-Fetch-Site": "cross-site"}, "urlencoded"),
    ({"Origin": "null", "Sec-Fetch-Site": "same-site"}, "urlencoded"),
    ({"Sec-Fetch-Site": "cross-site"}, "urlencoded"),
    ({"Sec-Fetch-Site": "same-site", "Origin": "https://digest.example.org.evil.example"}, "urlencoded"),
    ({}, "no token"),
]


@pytest.mark.parametrize(("headers", "body"), CROSS_SITE)
def test_a_cross_site_form_changes_nothing(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session], headers: dict[str, str], body: str
) -> None:
    url = f"/m/{people['ada@example.org']}"
    form = form_token_of(web.get(url).text)
    for action in ("pause", "filter"):
        fields = {"action": action, "filter": "evil"} | ({} if body == "no token" else {"form": form})
        content = (
            "\r\n".join(f"{k}={v}" for k, v in fields.items())
            if body == "text"
            else "&".join(f"{k}={v}" for k, v in fields.items())
        )
        sent = {"Content-Type": "application/x-www-form-urlencoded"} | headers
        response = web.post(url, content=content.encode(), headers=sent)
        assert response.status_code == 403, (headers, action, response.status_code)
        assert response.headers["content-security-policy"].startswith("default-src 'none'")
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
        assert ada is not None and ada.status is SubscriberStatus.ACTIVE and ada.filter == "gpu"
    same = web.post(
        url,
        data={"form": form, "action": "pause"},
        headers={"Origin": "https://digest.example.org", "Sec-Fetch-Site": "same-origin"},
    )
    assert same.status_code == 200 and status_of(factory, "ada@example.org") is SubscriberStatus.PAUSED


@pytest.mark.parametrize(
    ("site", "origin", "ours"),
    [
        # What Chromium sends from a page served with Referrer-Policy: no-referrer.
        ("same-origin", "null", True),
        ("same-origin", "https://digest.example.org", True),
        ("same-origin", "https://DIGEST.example.org:443", True),
        (None, "https://digest.example.org", True),
        (None, None, True),  # curl, a mail provider's one-click: the form token guards these
        ("none", None, True),
        ("same-origin", "https://digest.example.org:8443", False),
        ("same-origin", "http://digest.example.org", False),
        ("same-site", "https://www.digest.example.org", False),
        ("cross-site", "https://digest.example.org", False),
        (None, "null", False),
        (None, "https://evil.example", False),
        ("same-origin", "https://evil.example", False),  # DNS rebinding: the browser thinks it is one site
    ],
)
def test_the_origin_rule(site: str | None, origin: str | None, ours: bool) -> None:
    from bot.web.forms import from_our_page, origin_of

    assert from_our_page(site, origin, origin_of("https://digest.example.org/digests/")) is ours


def test_resuming_after_an_unsubscribe_takes_an_explicit_subscribe_again(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session]
) -> None:
    token = people["ada@example.org"]
    assert web.post(f"/u/{token}", content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK).status_code == 200
    page = web.get(f"/m/{token}")
    assert "Subscribe again" in page.text and "Resume digests" not in page.text
    form = form_token_of(page.text)
    assert web.post(f"/m/{token}", data={"form": form, "action": "resume"}).status_code == 400
    assert status_of(factory, "ada@example.org") is SubscriberStatus.UNSUBSCRIBED
    assert web.post(f"/m/{token}", data={"form": form, "action": "resubscribe"}).status_code == 200
    assert status_of(factory, "ada@example.org") is SubscriberStatus.ACTIVE


def test_no_redirects_and_one_404_for_every_unknown_path(web: httpx.Client, people: dict[str, str]) -> None:
    token = people["ada@example.org"]
    reference = web.get(f"/u/999999.{'B' * 24}")
    for path in (f"/u/{token}/", f"/m/{token}/", "/u/garbage/", "/healthz/", "//u/x", "/u/", "/m"):
        response = web.get(path, headers={"Host": "evil.example"})
        assert response.status_code == 404 and "location" not in response.headers, path
        assert response.text == reference.text, path
        assert response.headers["referrer-policy"] == "same-origin", path


@pytest.mark.parametrize("boundary", ["----x", "b0undary; charset=utf-8"])
def test_one_click_as_multipart_form_data_unsubscribes(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session], boundary: str
) -> None:
    name = boundary.split(";")[0]
    body = (
        f'--{name}\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n\r\nOne-Click\r\n--{name}--\r\n'
    ).encode()
    response = web.post(
        f"/u/{people['ada@example.org']}",
        content=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert response.status_code == 200
    assert status_of(factory, "ada@example.org") is SubscriberStatus.UNSUBSCRIBED
    assert status_of(factory, "bob@example.org") is SubscriberStatus.ACTIVE
    files = web.post(f"/u/{people['bob@example.org']}", files={"List-Unsubscribe": (None, "One-Click")})
    assert files.status_code == 200 and status_of(factory, "bob@example.org") is SubscriberStatus.UNSUBSCRIBED


def test_oversized_bodies_and_stuffed_forms_are_refused(
    web: httpx.Client, people: dict[str, str], factory: sessionmaker[Session]
) -> None:
    body = b"List-Unsubscribe=One-Click&pad=" + b"x" * 100_000
    assert web.post(f"/u/{people['ada@example.org']}", content=body, headers=ONE_CLICK).status_code == 413
    many = b"&".join(b"f%d=x" % i for i in range(30)) + b"&List-Unsubscribe=One-Click"
    assert web.post(f"/u/{people['ada@example.org']}", content=many, headers=ONE_CLICK).status_code == 400
    assert status_of(factory, "ada@example.org") is SubscriberStatus.ACTIVE


def test_the_link_in_a_delivered_digest_unsubscribes(
    factory: sessionmaker[Session], settings: Settings, people: dict[str, str], seed_files: list[Path]
) -> None:
    handler = SinkHandler()
    with Sink(handler) as sink:
        sending = settings.model_copy(update={"smtp": settings.smtp.model_copy(update={"port": sink.port})})
        ingest_file(factory, seed_files[0], now=DAY, rules=RULES)
        plan(factory, sending, RULES, now=DAY + timedelta(days=1), all_due=True)
        asyncio.run(deliver_now(factory, Parts(sending), clock=lambda: DAY + timedelta(days=1)))
    (to_bob,) = [r for r in handler.received if r.recipients == ["bob@example.org"]]
    message = BytesParser(policy=policy.default).parsebytes(to_bob.data)
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    https = re.search(r"<https://digest\.example\.org(/u/[^>]+)>", message["List-Unsubscribe"])
    assert https is not None
    with Server(create_app(settings, factory)) as client:
        # What a mail provider does on "unsubscribe": POST the one-click body to the header's URL.
        response = client.post(https.group(1), content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK)
    assert response.status_code == 200
    assert status_of(factory, "bob@example.org") is SubscriberStatus.UNSUBSCRIBED
    assert status_of(factory, "ada@example.org") is SubscriberStatus.ACTIVE


def test_digestbot_serve_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env |= {
        "DIGESTBOT_DATABASE__URL": f"sqlite:///{tmp_path / 'web.sqlite3'}",
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
        "DIGESTBOT_WEB__SIGNING_KEY": KEY,
        "DIGESTBOT_WEB__PUBLIC_URL": "https://digest.example.org",
    }
    proc = subprocess.Popen(
        [DIGESTBOT, "serve", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        health = wait_until_serving(proc, port)
        assert health.status_code == 200 and health.text == "ok"
        assert httpx.get(f"http://127.0.0.1:{port}/u/1.{'A' * 24}").status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        out, errors = proc.communicate(timeout=20)
    assert proc.returncode == 0, errors
    assert KEY not in out + errors and "/u/1." not in out + errors  # no key, no token in the logs
