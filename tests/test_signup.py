"""Sign-up with double opt-in, through a real uvicorn server, httpx and the test SMTP sink:
the confirmation mail and its link, expiry, the per-address and per-client limits,
one answer for every address, CSRF, and every bad field shown with nothing stored.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import SubscriberStatus
from bot.store.consents import consents_of
from bot.store.schema import SubscriberRow
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.optin import expire_signups
from bot.subscribers.settings import SETTINGS
from bot.subscribers.subscriptions import change_status, save
from bot.tokens import confirm_token_parts
from bot.tools.sink import Sink
from bot.web import create_app
from bot.web.forms import csrf_ok, csrf_pair
from tests.conftest import ROOT
from tests.helpers import Clock, Server, settings_for

START = datetime(2026, 11, 24, 9, tzinfo=UTC)


@pytest.fixture
def settings(tmp_path: Path, sink: Sink) -> Settings:
    return settings_for(tmp_path, site=True, smtp_port=sink.port, web={"signup": True, "signups_per_hour": 50})


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
def web(factory: sessionmaker[Session], settings: Settings, clock: Clock) -> Iterator[httpx.Client]:
    with Server(create_app(settings, factory, clock=clock)) as client:
        yield client


FORM = {"content-type": "application/x-www-form-urlencoded"}


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


def sign_up(web: httpx.Client, address: str, **fields: str | list[str]) -> httpx.Response:
    form = web.get("/subscribe")
    assert form.status_code == 200
    data: dict[str, str | list[str]] = {
        "csrf": csrf_of(form),
        "email": address,
        "name": "",
        "tag": ["cs.LG"],
        "filter": "",
        "cadence": "daily",
        "timezone": "Europe/Berlin",
        "send_hour": "7",
    }
    data.update(fields)
    return web.post("/subscribe", data=data)


def mails_to(sink: Sink, address: str) -> list[str]:
    return [r.message.get_body(("plain",)).get_content() for r in sink.received if address in r.recipients]


def settled(sink: Sink, count: int) -> None:
    """Wait for *count* messages in the sink (sign-up mail goes out after the answer), then
    make sure no more arrive."""
    deadline = time.monotonic() + 10
    while len(sink.received) < count:
        assert time.monotonic() < deadline, f"{len(sink.received)} of {count} messages arrived"
        time.sleep(0.02)
    time.sleep(0.3)
    assert len(sink.received) == count, [r.recipients for r in sink.received]


def link_in(body: str) -> str:
    found = re.search(r"http://digest\.example\.org(/c/\S+)", body)
    assert found, body
    return found.group(1)


def status(factory: sessionmaker[Session], email: str) -> SubscriberStatus | None:
    with factory() as session:
        found = get_subscriber(session, email)
        return found.status if found else None


def confirm_button(web: httpx.Client, path: str) -> httpx.Response:
    page = web.get(path)
    token = re.search(r'name="form" value="([^"]+)"', page.text)
    assert token, page.text
    return web.post(path, data={"form": token.group(1)})


def test_sign_up_confirm_by_mail_and_the_consent_record(
    web: httpx.Client, sink: Sink, factory: sessionmaker[Session]
) -> None:
    answer = sign_up(web, "ada@example.org", name="Ada", tag=["cs.LG", "cs.CL"], cadence="weekly:mon")
    assert answer.status_code == 200 and "Check your inbox" in answer.text
    settled(sink, 1)
    assert status(factory, "ada@example.org") is SubscriberStatus.PENDING
    (body,) = mails_to(sink, "ada@example.org")
    # The mail repeats what was picked from menus; the filter is on the page behind the link.
    assert "cs.lg" not in body and "every Monday at 07:00 (Europe/Berlin)" in body
    path = link_in(body)
    for _ in range(3):  # a link scanner's GETs confirm nothing
        page = web.get(path)
        assert page.status_code == 200 and "Confirm your subscription" in page.text
        assert "<code>cs.lg or cs.cl</code>" in page.text
    assert status(factory, "ada@example.org") is SubscriberStatus.PENDING
    done = confirm_button(web, path)
    assert done.status_code == 200 and "You are subscribed" in done.text and "/m/" in done.text
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
        assert ada is not None
        assert (ada.status, ada.filter, ada.cadence, ada.send_hour, ada.timezone, ada.name) == (
            SubscriberStatus.ACTIVE,
            "cs.lg or cs.cl",
            "weekly:mon",
            7,
            "Europe/Berlin",
            "Ada",
        )
        events = consents_of(session, ada.id)
    assert [(e.event, e.client, e.page, e.address) for e in events] == [
        ("signup", "127.0.0.1", "http://digest.example.org/subscribe", "ada@example.org"),
        ("confirm", "127.0.0.1", "http://digest.example.org/c/", "ada@example.org"),
    ]
    again = web.get(path)  # a second visit says so and changes nothing
    assert again.status_code == 200 and "You are subscribed" in again.text


def test_an_expired_link_confirms_nothing_and_the_sign_up_is_deleted(
    web: httpx.Client, sink: Sink, factory: sessionmaker[Session], settings: Settings, clock: Clock
) -> None:
    sign_up(web, "bob@example.org")
    settled(sink, 1)
    path = link_in(mails_to(sink, "bob@example.org")[0])
    page = web.get(path)
    form = re.search(r'name="form" value="([^"]+)"', page.text)
    assert form
    clock.now = START + timedelta(hours=48)
    late = web.post(path, data={"form": form.group(1)})
    assert late.status_code == 410 and "expired" in late.text
    assert status(factory, "bob@example.org") is SubscriberStatus.PENDING
    assert expire_signups(factory, settings, START + timedelta(hours=47)) == 0
    assert expire_signups(factory, settings, clock.now + timedelta(seconds=1)) == 1
    assert status(factory, "bob@example.org") is None
    assert web.get(path).status_code == 404  # its sign-up is gone


def test_repeated_sign_ups_within_the_interval_send_one_mail(
    web: httpx.Client, sink: Sink, factory: sessionmaker[Session], clock: Clock
) -> None:
    for _ in range(4):
        assert sign_up(web, "cy@example.org").status_code == 200
    settled(sink, 1)
    clock.now = START + timedelta(minutes=9)
    sign_up(web, "CY@example.org")
    settled(sink, 1)
    clock.now = START + timedelta(minutes=10)
    sign_up(web, "cy@example.org", cadence="weekdays")
    settled(sink, 2)
    first, second = mails_to(sink, "cy@example.org")
    assert "Monday to Friday" in second and "every day" in first
    # Either link confirms, until it expires: each is the person's own.
    assert "You are subscribed" in confirm_button(web, link_in(first)).text
    with factory() as session:
        cy = get_subscriber(session, "cy@example.org")
        assert cy is not None and cy.cadence == "weekdays" and cy.status is SubscriberStatus.ACTIVE


def _answer(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, re.sub(r"\S+@example\.org", "ADDRESS", response.text)


def test_the_same_answer_whether_new_pending_subscribed_or_just_left(
    web: httpx.Client, sink: Sink, factory: sessionmaker[Session], settings: Settings
) -> None:
    save(factory, settings, [clean_fields("old@example.org"), clean_fields("gone@example.org")], START)
    change_status(factory, "gone@example.org", SubscriberStatus.UNSUBSCRIBED, START - timedelta(hours=2))
    answers = {
        "new": _answer(sign_up(web, "new@example.org")),
        "pending": _answer(sign_up(web, "new@example.org")),
        "subscribed": _answer(sign_up(web, "old@example.org")),
        "just left": _answer(sign_up(web, "gone@example.org")),
    }
    assert len(set(answers.values())) == 1, answers
    settled(sink, 2)
    subjects = {r.recipients[0]: r.message["Subject"] for r in sink.received}
    assert subjects == {
        "new@example.org": "Confirm your subscription to Research Digest",  # once: pending within the interval
        "old@example.org": "Your subscription to Research Digest",
    }
    (reminder,) = mails_to(sink, "old@example.org")
    assert "subscribed already" in reminder and "http://digest.example.org/m/" in reminder
    assert mails_to(sink, "gone@example.org") == []  # left less than a day ago: no mail at all
    # Nothing about old@ changed, and gone@ stayed unsubscribed.
    assert status(factory, "old@example.org") is SubscriberStatus.ACTIVE
    assert status(factory, "gone@example.org") is SubscriberStatus.UNSUBSCRIBED


def test_a_form_without_its_csrf_pair_or_from_another_site_is_refused(
    web: httpx.Client, sink: Sink, factory: sessionmaker[Session]
) -> None:
    page = web.get("/subscribe")
    token = csrf_of(page)
    base = {"email": "eve@example.org", "tag": "cs.LG", "cadence": "daily", "timezone": "UTC", "send_hour": "8"}
    assert web.post("/subscribe", data=base).status_code == 403  # no token
    assert web.post("/subscribe", data={**base, "csrf": token[:-1] + "0"}).status_code == 403  # altered
    fresh = httpx.Client(base_url=str(web.base_url))  # the token, without the cookie that goes with it
    assert fresh.post("/subscribe", data={**base, "csrf": token}).status_code == 403
    cross = web.post("/subscribe", data={**base, "csrf": token}, headers={"origin": "https://evil.example"})
    assert cross.status_code == 403
    site = web.post("/subscribe", data={**base, "csrf": token}, headers={"sec-fetch-site": "cross-site"})
    assert site.status_code == 403
    time.sleep(0.3)
    assert sink.received == [] and status(factory, "eve@example.org") is None
    # A refused form is shown again with a new pair; that pair works.
    assert web.post("/subscribe", data={**base, "csrf": csrf_of(web.get("/subscribe"))}).status_code == 200


BAD_FIELDS = [
    ({"email": "not an address"}, "email:"),
    ({"email": ""}, "email: give your email address"),
    ({"name": "Eve\r\nBcc: x@y.z"}, "name: contains control characters"),
    ({"name": "=?utf-8?q?Eve=0D=0ABcc:_x@y.z?="}, "name: contains control characters"),
    ({"filter": "gpu and (", "tag": []}, "filter:"),
    ({"tag": []}, "filter: tick at least one tag"),
    ({"tag": ["gpu or"]}, "filter: &#39;gpu or&#39; is not a tag"),
    ({"filter": 'author:""'}, "author: needs a name"),
    ({"cadence": "weekly"}, "cadence: &#39;weekly&#39;: a weekly digest needs its day"),
    ({"cadence": "hourly"}, "cadence:"),
    ({"timezone": "Mars/Olympus"}, "timezone: &#39;Mars/Olympus&#39; is not an IANA time zone"),
    ({"send_hour": "24"}, "send_hour: 24 is not a whole hour"),
    ({"send_hour": "seven"}, "send_hour:"),
]


@pytest.mark.parametrize(("bad", "said"), BAD_FIELDS, ids=[b[1][:24] for b in BAD_FIELDS])
def test_every_bad_field_is_shown_on_the_page_and_nothing_is_stored(
    web: httpx.Client, sink: Sink, factory: sessionmaker[Session], bad: dict[str, str], said: str
) -> None:
    answer = sign_up(web, "fay@example.org", **bad)
    assert answer.status_code == 400 and said in answer.text, answer.text[-2000:]
    shown = bad.get("filter") or bad.get("email") or ""
    if shown and "<" not in shown and '"' not in shown:
        assert f'value="{shown}"' in answer.text  # what they typed is still in the form
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(SubscriberRow)) == 0
    time.sleep(0.2)
    assert sink.received == []


def test_too_many_sign_ups_from_one_client_are_refused(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, clock: Clock
) -> None:
    settings = settings.model_copy(update={"web": settings.web.model_copy(update={"signups_per_hour": 3})})
    with Server(create_app(settings, factory, clock=clock)) as web:
        answers = [sign_up(web, f"p{n}@example.org").status_code for n in range(5)]
        assert answers == [200, 200, 200, 429, 429]
        settled(sink, 3)
        clock.now = START + timedelta(hours=1, minutes=1)
        assert sign_up(web, "p9@example.org").status_code == 200
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(SubscriberRow)) == 4


def test_without_web_signup_there_is_no_page(factory: sessionmaker[Session], settings: Settings) -> None:
    settings = settings.model_copy(update={"web": settings.web.model_copy(update={"signup": False})})
    with Server(create_app(settings, factory)) as web:
        assert web.get("/subscribe").status_code == 404
        assert web.post("/subscribe", data={"email": "x@example.org"}).status_code == 404


def test_the_page_offers_the_stored_tags_and_the_browser_zone_script_is_allowed(
    web: httpx.Client, factory: sessionmaker[Session], seed_files: list[Path]
) -> None:
    from bot.choose.tagging import load_rules
    from bot.ingest.storing import ingest_file

    ingest_file(factory, seed_files[0], now=START, rules=load_rules(ROOT / "config" / "tags.toml"))
    page = web.get("/subscribe")
    boxes = re.findall(r'name="tag" value="([^"]+)"', page.text)
    assert "gpu" in boxes and len(boxes) == len(set(boxes))
    assert re.search(r'value="gpu"> gpu <span class="muted">\(\d+\)</span>', page.text)
    assert '<option value="UTC" selected>UTC</option>' in page.text  # the default, without script
    script = re.search(r"<script>(.*?)</script>", page.text, re.S)
    assert script is not None
    import base64
    import hashlib

    digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in page.headers["content-security-policy"]


def test_the_cli_adds_with_a_confirmation_mail_and_shows_the_consent(tmp_path: Path, sink: Sink) -> None:
    import os

    from tests.helpers import Cli

    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env.update(
        {
            "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
            "DIGESTBOT_SMTP__PORT": str(sink.port),
            "DIGESTBOT_WEB__PUBLIC_URL": "https://digest.example.org",
            "COLUMNS": "250",
        }
    )

    run = Cli(tmp_path, env, placed=False)

    added = run("subscribers", "add", "ana@example.org", "--confirm", "--cadence", "Weekly:Tuesday", "--filter", "gpu")
    assert "pending ana@example.org: confirmation link mailed" in added.stdout
    settled(sink, 1)
    (body,) = mails_to(sink, "ana@example.org")
    assert "every Tuesday at 08:00 (UTC)" in body and "https://digest.example.org/c/" in body
    again = run("subscribers", "add", "ana@example.org", "--confirm", code=1)
    assert "a moment ago" in again.stderr and again.stderr.count("\n") == 1
    shown = run("subscribers", "show", "ana@example.org").stdout
    assert re.search(
        r"consent\s+\d{4}-\d\d-\d\d \d\d:\d\d UTC ana@example\.org signed up at digestbot subscribers add", shown
    )
    assert "pending" in shown and "weekly:tue" in shown
    run("subscribers", "add", "ben@example.org", "--cadence", "weekdays")
    twice = run("subscribers", "add", "ben@example.org", "--confirm", code=1)
    assert "ben@example.org is already subscribed" in twice.stderr
    assert (
        "ben@example.org added by an operator (subscribers add, by "
        in run("subscribers", "show", "ben@example.org").stdout
    )
    bad = run("subscribers", "add", "cal@example.org", "--cadence", "hourly", code=2)
    assert bad.stderr.startswith("error: --cadence: 'hourly' is not daily, weekdays, weekly:<day>")
    csv = tmp_path / "people.csv"
    csv.write_text("email,cadence\ndan@example.org,weekly:fri\neve@example.org,sometimes\n", encoding="utf-8")
    imported = run("subscribers", "import", str(csv), code=1)
    assert "1 added" in imported.stdout and "cadence: 'sometimes'" in imported.stderr
    exported = run("subscribers", "export").stdout.splitlines()
    settings = list(SETTINGS)  # the yes/no settings follow, each a column, at their defaults
    assert exported[0].endswith(",cadence" + "".join(f",{s.name}" for s in settings))
    dan_row = ",weekly:fri" + "".join(",yes" if s.default else ",no" for s in settings)
    assert any(r.startswith("dan@example.org,") and r.endswith(dan_row) for r in exported)
    dan = run("subscribers", "show", "dan@example.org", "--json").stdout
    assert '"event": "operator"' in dan and "subscribers import" in dan


@given(st.text(max_size=80), st.text(max_size=40))
def test_any_csrf_field_and_cookie_are_refused_without_error(field: str, cookie: str) -> None:
    key = b"k" * 32
    assert csrf_ok(key, field, cookie, time.time()) is False
    made, nonce = csrf_pair(key, time.time())
    assert csrf_ok(key, made, nonce, time.time()) and not csrf_ok(key, made, nonce + "x", time.time())
    assert not csrf_ok(key, made, nonce, time.time() + 5 * 3600)  # expired
    assert not csrf_ok(key, f"{int(time.time())}.n.é{field}", "n", time.time())  # a non-ASCII signature


@given(st.text(max_size=60) | st.from_regex(r"\A\d{1,20}\.\d{1,14}\.[A-Za-z0-9_-]{24}\Z"))
def test_any_confirmation_token_is_read_without_error(token: str) -> None:
    parts = confirm_token_parts(token)
    assert parts is None or (parts[0] >= 0 and parts[1].tzinfo is not None)


def test_garbage_confirmation_links_are_the_plain_404(web: httpx.Client) -> None:
    for token in ["x", "1.99999999999.AAAAAAAAAAAAAAAAAAAAAAAA", "1." + "9" * 20 + "." + "A" * 24, "%00", "1.2.3"]:
        assert web.get(f"/c/{token}").status_code == 404
        assert web.post(f"/c/{token}", data={"form": "x"}).status_code == 404


hostile = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)


@examples(max_examples=30, deadline=None)
@given(
    email=hostile | st.emails().map(str),
    name=hostile,
    filter_text=hostile,
    tags=st.lists(hostile, max_size=5),
    cadence=hostile,
    zone=hostile,
    hour=hostile,
)
def test_any_form_gets_a_page_never_a_server_error(
    web: httpx.Client,
    sink: Sink,
    email: str,
    name: str,
    filter_text: str,
    tags: list[str],
    cadence: str,
    zone: str,
    hour: str,
) -> None:
    form = {"email": email, "name": name, "filter": filter_text, "tag": tags, "cadence": cadence}
    answer = sign_up(web, "x", **form, timezone=zone, send_hour=hour)
    assert answer.status_code in (200, 400), answer.text[-500:]
    assert "Traceback" not in answer.text and "<script>alert" not in answer.text


def test_a_confirmation_post_without_its_form_token_confirms_nothing(
    web: httpx.Client, sink: Sink, factory: sessionmaker[Session]
) -> None:
    sign_up(web, "gil@example.org")
    settled(sink, 1)
    path = link_in(mails_to(sink, "gil@example.org")[0])
    for token in ["é", "", "0" * 32]:
        assert web.post(path, data={"form": token}).status_code == 403
    assert web.post(path, data={"form": "x"}, headers={"origin": "https://evil.example"}).status_code == 403
    assert status(factory, "gil@example.org") is SubscriberStatus.PENDING


def test_forged_confirmation_links_spend_the_miss_budget(factory: sessionmaker[Session], settings: Settings) -> None:
    """A client guessing /c/ tokens is slowed down as one guessing /u/ tokens is."""
    # No refill to speak of (one miss per 1,000 s): at the default 20 a second, a loaded
    # machine taking 50 ms a request earned a sixth miss back and answered 404 (CI run).
    limits = {"misses_burst": 5, "misses_per_second": 0.001}
    tight = settings.model_copy(update={"web": settings.web.model_copy(update=limits)})
    save(factory, tight, [clean_fields("ada@example.org")], START)
    with Server(create_app(tight, factory, clock=lambda: START)) as web:
        codes = [web.get(f"/c/1.{n:09d}.{'A' * 24}").status_code for n in range(8)]
        assert codes == [404] * 5 + [429] * 3
        assert web.get(f"/u/1.{'A' * 24}").status_code == 429  # one budget for both
        assert web.post(f"/c/1.000000001.{'A' * 24}", data={"form": "x"}).status_code == 429


def test_the_confirmation_mail_carries_nothing_a_stranger_typed(
    web: httpx.Client, sink: Sink, factory: sessionmaker[Session]
) -> None:
    """Anyone can make the list mail any address: the mail must not carry their words
    (as a name it would head the message) or a link of theirs (a filter can hold a URL)."""
    name = "URGENT: your bank account is locked, call +1 555 0100"
    answer = sign_up(
        web, "victim@example.org", name=name, tag=[], filter='"http://evil.example/login" or "www.evil.example"'
    )
    assert answer.status_code == 200
    settled(sink, 1)
    (received,) = sink.received
    raw = received.data.decode("utf-8", "replace")
    assert "URGENT" not in raw and "evil.example" not in raw and "555 0100" not in raw and "locked" not in raw
    assert received.message["To"] == "victim@example.org"
    page = web.get(link_in(mails_to(sink, "victim@example.org")[0]))
    # The page behind the link shows the filter, as text, before anything is confirmed.
    assert "<code>&#34;http://evil.example/login&#34; or &#34;www.evil.example&#34;</code>" in page.text
    assert 'href="http://evil' not in page.text
