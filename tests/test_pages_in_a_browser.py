"""Every page, used by a person in a real browser: headless Chromium, driven through
chromedriver, clicking the buttons of ``digestbot serve`` (a separate process, as
deployed), reading the confirmation mail from the test SMTP sink, and checking the
store after each step.  Each page is audited with axe-core at a phone's width and a
desktop's, in light and dark mode.

An HTTP client is not a browser: it sends no Origin, runs no script and keeps no cookie
policy.  These tests are what caught every form being refused with ``Origin: null``.
"""

from __future__ import annotations

import http.server
import os
import re
import socketserver
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from bot.domain import Subscriber, SubscriberStatus
from bot.domain.llm import Tldr
from bot.store.consents import consents_of
from bot.store.engine import make_engine, sessions
from bot.store.schema import Entry
from bot.store.subscribers import get_subscriber
from bot.store.taste_tables import Feedback, LibraryPaperRow
from bot.store.tldrs import save_tldr
from bot.tokens import make_token
from bot.tools.sink import Sink, SinkHandler, free_port
from tests.browser import audit, axe_missing, browser_missing, chromium
from tests.conftest import ROOT, SEEDS
from tests.helpers import DIGESTBOT, Cli, rich_digest, wait_until_serving

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing())),
]
KEY = "browser-tests-signing-key-0123456789"


@dataclass
class Site:
    """``digestbot serve`` on 127.0.0.1 with its store, its config and the SMTP sink."""

    url: str
    folder: Path
    env: dict[str, str]
    sink: Sink
    engine: Engine
    factory: sessionmaker[Session] = field(init=False)

    def __post_init__(self) -> None:
        self.factory = sessions(self.engine)

    def cli(self, *args: str) -> str:
        return Cli(self.folder, self.env, placed=False)(*args).stdout

    def subscriber(self, email: str) -> Subscriber:
        with self.factory() as session:
            found = get_subscriber(session, email)
        assert found is not None, email
        return found

    def add(self, email: str, *options: str) -> str:
        """A subscriber added on the command line; the token of their links."""
        self.cli("subscribers", "add", email, *options)
        found = self.subscriber(email)
        return make_token(KEY.encode(), found.id, found.unsubscribe_secret)

    def mails_to(self, email: str) -> list[EmailMessage]:
        return [r.message for r in self.sink.received if email in r.recipients]

    def wait_for_mail(self, email: str, count: int = 1) -> EmailMessage:
        deadline = time.monotonic() + 15
        while len(self.mails_to(email)) < count:
            assert time.monotonic() < deadline, f"no mail {count} to {email}"
            time.sleep(0.05)
        return self.mails_to(email)[count - 1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with serving(tmp_path_factory.mktemp("site")) as running:
        yield running


@contextmanager
def serving(folder: Path, more_config: str = "") -> Iterator[Site]:
    """``digestbot serve`` on the seeds' entries, with *more_config* added to its file."""
    port = free_port()
    with Sink(SinkHandler()) as sink:
        config = folder / "digestbot.toml"
        config.write_text(
            f"""
[paths]
var_dir = "{folder / "var"}"
dump_dir = "{SEEDS}"
[smtp]
host = "127.0.0.1"
port = {sink.port}
[sender]
from_address = "digest@example.org"
from_name = "Research Digest"
[web]
public_url = "http://127.0.0.1:{port}"
signup = true
[llm]
base_url = "http://127.0.0.1:9/v1"
chat_model = "llama3.1:8b"
languages = ["en", "de", "zh"]
{more_config}
""",
            encoding="utf-8",
        )
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "HOME": str(folder),
            "DIGESTBOT_CONFIG": str(config),
            "DIGESTBOT_WEB__SIGNING_KEY": KEY,
        }
        subprocess.run(
            [DIGESTBOT, "dumps", "ingest", str(SEEDS)],
            cwd=folder,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        server = subprocess.Popen(
            [DIGESTBOT, "serve", "--port", str(port)],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until_serving(server, port)
            engine = make_engine(f"sqlite:///{folder / 'var' / 'digestbot.sqlite3'}")
            yield Site(f"http://127.0.0.1:{port}", folder, env, sink, engine)
            engine.dispose()
        finally:
            server.terminate()
            _, errors = server.communicate(timeout=30)
        assert "Traceback" not in errors, errors[-3000:]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def audited(browser: Any) -> Iterator[Callable[[str], None]]:
    """Audit the page shown now with axe-core (``tests.browser.audit``); the test fails at
    its end with every problem found on every page it audited."""
    found: list[str] = []
    missing = axe_missing()

    def check(name: str) -> None:
        if missing is None:
            found.extend(audit(browser, name))

    yield check
    assert found == [], "\n".join(found)


# --- what a person does -----------------------------------------------------------------


def again(action: Callable[[], Any]) -> Any:
    """*action*, tried again when the page was replaced under it (Chromium still
    settling the last navigation): a browser race, not a finding."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    for attempt in range(5):
        try:
            return action()
        except StaleElementReferenceException:
            pass
        except WebDriverException as exc:
            if "does not belong to the document" not in str(exc) or attempt == 4:
                raise
        time.sleep(0.2)
    return action()


def settled(driver: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.readyState") == "complete")


def heading(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    settled(driver)
    return str(again(lambda: driver.find_element(By.TAG_NAME, "h1").text))


def press(driver: Any, css: str, *, text: str | None = None) -> str:
    """Click the button (or link) *css* finds, whose text is *text* if given; wait for the
    page it leads to; that page's h1."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    settled(driver)

    def find() -> tuple[Any, list[Any]]:
        candidates = driver.find_elements(By.CSS_SELECTOR, css)
        chosen = [c for c in candidates if text is None or c.text.strip() == text]
        assert chosen, f"nothing to press at {css!r} {text or ''}: {[c.text for c in candidates]}"
        return driver.find_element(By.TAG_NAME, "html"), chosen

    page, chosen = again(find)
    chosen[0].click()
    WebDriverWait(driver, 20).until(lambda _: _gone(page))
    return heading(driver)


def _gone(element: Any) -> bool:
    """Whether *element* left the document: stale, or (while Chromium swaps documents)
    a node its inspector no longer finds, which it reports as an unknown error."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc) or "No node with given id" in str(exc):
            return True
        raise
    return False


def type_into(driver: Any, css: str, text: str) -> None:
    from selenium.webdriver.common.by import By

    settled(driver)

    def typed() -> None:
        box = driver.find_element(By.CSS_SELECTOR, css)
        box.clear()
        box.send_keys(text)

    again(typed)


def choose(driver: Any, name: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    settled(driver)
    again(lambda: Select(driver.find_element(By.CSS_SELECTOR, f'select[name="{name}"]')).select_by_value(value))


def tick(driver: Any, tags: list[str], *, only: bool = True) -> None:
    """Tick the tag boxes named (and, with *only*, untick every other)."""
    from selenium.webdriver.common.by import By

    def ticked() -> None:
        for box in driver.find_elements(By.CSS_SELECTOR, 'input[name="tag"]'):
            wanted = box.get_attribute("value") in tags
            if box.is_selected() != wanted and (wanted or only):
                box.click()

    settled(driver)
    again(ticked)


def text_of(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    settled(driver)
    return " ".join(str(again(lambda: driver.find_element(By.TAG_NAME, "body").text)).split())


def eventually(check: Callable[[], bool], what: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


# --- the flows ---------------------------------------------------------------------------


def test_sign_up_with_tags_and_confirm_by_clicking(site: Site, browser: Any, audited: Callable[[str], None]) -> None:
    browser.get(site.url + "/subscribe")
    assert heading(browser) == "Subscribe to Research Digest"
    audited("sign-up page")
    # Issue 48, item 11: the browser's own zone first and chosen; then zones by region.
    device = browser.execute_script("return Intl.DateTimeFormat().resolvedOptions().timeZone")
    first = browser.execute_script(
        "const s = document.getElementById('timezone'); return [s.options[0].value, s.value]"
    )
    assert first == [device, device]
    regions = browser.execute_script("return [...document.querySelectorAll('#timezone optgroup')].map(g => g.label)")
    assert regions[:3] == ["Africa", "America", "Antarctica"] and "Europe" in regions
    type_into(browser, "#email", "grace@example.org")
    type_into(browser, "#name", "Grace")
    tick(browser, ["gpu", "llm"])
    choose(browser, "cadence", "weekly:mon")
    choose(browser, "timezone", "Asia/Tokyo")
    choose(browser, "send_hour", "7")
    assert press(browser, "button[type=submit]", text="Subscribe") == "Check your inbox"
    audited("sign-up sent")
    grace = site.subscriber("grace@example.org")
    assert (grace.status, grace.filter, grace.cadence, grace.timezone, grace.send_hour, grace.name) == (
        SubscriberStatus.PENDING,
        "gpu or llm",
        "weekly:mon",
        "Asia/Tokyo",
        7,
        "Grace",
    )
    mail = site.wait_for_mail("grace@example.org")
    body = mail.get_body(("plain",))
    assert body is not None
    found = re.search(r"http://127\.0\.0\.1:\d+/c/\S+", body.get_content())
    assert found, body.get_content()
    browser.get(found.group())
    assert heading(browser) == "Confirm your subscription"
    assert "filter: gpu or llm" in text_of(browser)
    audited("confirmation page")
    assert site.subscriber("grace@example.org").status is SubscriberStatus.PENDING  # opening it confirms nothing
    assert press(browser, "button[type=submit]", text="Confirm") == "You are subscribed"
    audited("confirmed")
    grace = site.subscriber("grace@example.org")
    assert grace.status is SubscriberStatus.ACTIVE
    with site.factory() as session:
        events = [(e.event, e.client) for e in consents_of(session, grace.id)]
    assert events == [("signup", "127.0.0.1"), ("confirm", "127.0.0.1")]
    assert press(browser, "a", text="Manage your subscription") == "Your digest"
    assert "grace@example.org — status: active" in text_of(browser)


def test_sign_up_with_an_advanced_filter_and_a_mistake(
    site: Site, browser: Any, audited: Callable[[str], None]
) -> None:
    browser.get(site.url + "/subscribe")
    type_into(browser, "#email", "carver@example.org")
    type_into(browser, "#filter", "(snn and fpga) or (")
    assert press(browser, "button[type=submit]", text="Subscribe") == "Subscribe to Research Digest"
    assert "filter:" in text_of(browser)  # the mistake, named on the page
    audited("sign-up with an error")
    with site.factory() as session:
        assert get_subscriber(session, "carver@example.org") is None
    type_into(browser, "#filter", '(snn and fpga) or "kv cache"')
    choose(browser, "cadence", "weekdays")
    choose(browser, "timezone", "America/New_York")
    choose(browser, "send_hour", "18")
    assert press(browser, "button[type=submit]", text="Subscribe") == "Check your inbox"
    carver = site.subscriber("carver@example.org")
    assert (carver.filter, carver.cadence, carver.timezone, carver.send_hour) == (
        '(snn and fpga) or "kv cache"',
        "weekdays",
        "America/New_York",
        18,
    )
    body = site.wait_for_mail("carver@example.org").get_body(("plain",))
    assert body is not None
    found = re.search(r"http://127\.0\.0\.1:\d+/c/\S+", body.get_content())
    assert found
    browser.get(found.group())
    assert 'filter: (snn and fpga) or "kv cache"' in text_of(browser)  # with the parentheses typed
    assert press(browser, "button[type=submit]", text="Confirm") == "You are subscribed"
    assert site.subscriber("carver@example.org").status is SubscriberStatus.ACTIVE


def test_several_interests_on_the_sign_up_and_manage_pages(
    site: Site, browser: Any, audited: Callable[[str], None]
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(site.url + "/subscribe")
    type_into(browser, "#email", "hedy@example.org")
    type_into(browser, "#filter", "Spiking: snn; spiking: fpga")
    assert press(browser, "button[type=submit]", text="Subscribe") == "Subscribe to Research Digest"
    assert "two interests are named 'spiking'" in text_of(browser)
    type_into(browser, "#filter", 'Spiking:  snn or fpga ;Serving: llm and "kv cache"')
    assert press(browser, "button[type=submit]", text="Subscribe") == "Check your inbox"
    two = 'Spiking: snn or fpga; Serving: llm and "kv cache"'
    assert site.subscriber("hedy@example.org").filter == two

    token = site.add("alan@example.org", "--filter", two)
    browser.get(f"{site.url}/m/{token}")
    assert browser.find_element(By.ID, "filter").get_attribute("value") == two
    audited("manage page, two interests")
    type_into(browser, "#filter", two + "; Agents: agents or (")
    press(browser, "button[type=submit]", text="Save")
    assert "filter:" in text_of(browser) and site.subscriber("alan@example.org").filter == two
    type_into(browser, "#filter", two + "; Agents: agents")
    press(browser, "button[type=submit]", text="Save")
    assert "Saved." in text_of(browser)
    assert site.subscriber("alan@example.org").filter == two + "; Agents: agents"

    # Interests of one tag each are no ticked boxes: saved as they are, names and all.
    tags_only = "Hardware: gpu; Spiking: snn"
    browser.get(f"{site.url}/m/{site.add('joan@example.org', '--filter', tags_only)}")
    assert browser.find_element(By.ID, "filter").get_attribute("value") == tags_only
    assert not browser.find_elements(By.CSS_SELECTOR, "input[name=tag]:checked")
    choose(browser, "send_hour", "10")
    press(browser, "button[type=submit]", text="Save")
    assert "Saved." in text_of(browser) and site.subscriber("joan@example.org").filter == tags_only


def test_the_manage_page_names_the_interests_with_a_model_of_their_own(
    site: Site, browser: Any, audited: Callable[[str], None]
) -> None:
    """Two entries rated "more like this" under each of two interests: each interest gets
    a model of its own, and the manage page says which."""
    from datetime import UTC, datetime

    from bot.choose.tagging import load_rules
    from bot.config import Settings
    from bot.store.schema import Entry
    from bot.taste.library_service import give_feedback
    from bot.taste.training import refresh_models

    token = site.add("margaret@example.org", "--filter", 'Spiking: snn or fpga; Serving: llm and "kv cache"')
    reader = site.subscriber("margaret@example.org").id
    with site.factory() as session:
        rated = list(session.scalars(select(Entry.id).order_by(Entry.id).limit(4)))
    now = datetime.now(UTC)
    for entry_id, interest in zip(rated, ["Spiking", "Spiking", "Serving", "Serving"], strict=True):
        assert give_feedback(site.factory, reader, entry_id, "more", now, interest)
    assert refresh_models(site.factory, now, only=[reader], rules=load_rules(Settings().paths.tags_file)).trained == 1

    browser.get(f"{site.url}/m/{token}")
    said = "Spiking, Serving each have a model of their own, trained on what you kept and rated for them."
    assert said in text_of(browser)
    audited("manage page, a model per interest")


def test_every_manage_form_by_clicking(site: Site, browser: Any, audited: Callable[[str], None]) -> None:
    token = site.add("linus@example.org", "--filter", "gpu")
    manage = f"{site.url}/m/{token}"
    browser.get(manage)
    assert heading(browser) == "Your digest"
    audited("manage page")

    tick(browser, ["gpu", "snn"])
    assert press(browser, "button[type=submit]", text="Save") == "Your digest"
    assert "Saved." in text_of(browser)
    assert site.subscriber("linus@example.org").filter == "gpu or snn"

    tick(browser, [], only=True)
    type_into(browser, "#filter", "(gpu and llm) or snn")
    choose(browser, "cadence", "weekly:fri")
    choose(browser, "timezone", "Europe/Berlin")
    choose(browser, "send_hour", "9")
    press(browser, "button[type=submit]", text="Save")
    linus = site.subscriber("linus@example.org")
    assert (linus.filter, linus.cadence, linus.timezone, linus.send_hour) == (
        "(gpu and llm) or snn",
        "weekly:fri",
        "Europe/Berlin",
        9,
    )
    from selenium.webdriver.common.by import By

    assert browser.find_element(By.ID, "filter").get_attribute("value") == "(gpu and llm) or snn"
    audited("manage page, saved")

    type_into(browser, "#threshold", "0.4")
    press(browser, "form:has(#threshold) button")
    assert "liked means a taste score above 0.40" in text_of(browser)
    assert site.subscriber("linus@example.org").taste_threshold == pytest.approx(0.4)

    browser.find_element(By.ID, "library").send_keys(str(ROOT / "config" / "library.example.bib"))
    press(browser, "button", text="Add to my library")
    shown = text_of(browser)
    assert "Added 2 papers to your library" in shown, shown
    assert "Your model is trained with the next planning pass" in shown and "Add two papers" not in shown
    with site.factory() as session:
        assert len(session.scalars(select(LibraryPaperRow).where(LibraryPaperRow.subscriber_id == linus.id)).all()) == 2
    audited("manage page after an upload")

    press(browser, "button", text="Stop listing revised entries and library news")
    assert site.subscriber("linus@example.org").send_updates is False
    press(browser, "button", text="List revised entries and library news again")
    assert site.subscriber("linus@example.org").send_updates is True

    press(browser, "button", text="Pause digests")
    assert site.subscriber("linus@example.org").status is SubscriberStatus.PAUSED
    audited("manage page, paused")
    press(browser, "button", text="Resume digests")
    assert site.subscriber("linus@example.org").status is SubscriberStatus.ACTIVE

    assert press(browser, "button", text="Unsubscribe") == "You are unsubscribed"
    audited("unsubscribed")
    eventually(
        lambda: site.subscriber("linus@example.org").status is SubscriberStatus.UNSUBSCRIBED, "unsubscribe applied"
    )
    assert press(browser, "a", text="Manage your subscription") == "Your digest"
    audited("manage page, unsubscribed")
    press(browser, "button", text="Subscribe again")
    assert site.subscriber("linus@example.org").status is SubscriberStatus.ACTIVE


def test_a_reader_chooses_their_language_and_reads_the_models_tldrs(
    site: Site, browser: Any, audited: Callable[[str], None]
) -> None:
    """The manage page offers the operator's languages; the one chosen is what the next
    digest's TL;DRs are in, shown under each title and marked as the model's."""
    token = site.add("lena@example.org", "--filter", "*", "--backfill", "all")
    browser.get(f"{site.url}/m/{token}")
    assert "Summaries in your language" in text_of(browser)
    choose(browser, "language", "zh")
    assert press(browser, "form:has(#language) button") == "Your digest"
    assert "TL;DRs are in that language" in text_of(browser)
    assert site.subscriber("lena@example.org").language == "zh"
    audited("manage page, a language chosen")

    with site.factory() as session, session.begin():
        for entry_id in session.scalars(select(Entry.id)):
            save_tldr(
                session,
                entry_id,
                Tldr(f"第{entry_id}篇：一个更快的注意力内核。", "zh", "llama3.1:8b", datetime.now(UTC)),
            )
    site.cli("send-now", "lena@example.org")
    html_part = site.wait_for_mail("lena@example.org").get_body(("html",))
    assert html_part is not None
    as_delivered = site.folder / "lena.html"
    as_delivered.write_text(html_part.get_content(), encoding="utf-8")
    browser.get(as_delivered.as_uri())
    shown = text_of(browser)
    assert "TL;DR by a language model (llama3.1:8b): 第" in shown and "一个更快的注意力内核。" in shown, shown[:2000]
    audited("the digest with TL;DRs")


def test_one_click_unsubscribe_page(site: Site, browser: Any, audited: Callable[[str], None]) -> None:
    token = site.add("ken@example.org")
    browser.get(f"{site.url}/u/{token}")
    assert heading(browser) == "Unsubscribe?"
    audited("unsubscribe page")
    assert site.subscriber("ken@example.org").status is SubscriberStatus.ACTIVE
    assert press(browser, "button", text="Unsubscribe") == "You are unsubscribed"
    eventually(
        lambda: site.subscriber("ken@example.org").status is SubscriberStatus.UNSUBSCRIBED, "unsubscribe applied"
    )


def test_an_unsubscribe_the_journal_cannot_take_says_try_again(
    site: Site, browser: Any, audited: Callable[[str], None]
) -> None:
    """The journal held by another writer (a full disk answers the same): the click is
    answered within seconds with "try again in a minute", not acknowledged (the write it
    began may still land once the journal frees, which only does what was asked); the
    next click unsubscribes."""
    import sqlite3

    token = site.add("nils@example.org")
    browser.get(f"{site.url}/u/{token}")
    journal = sqlite3.connect(site.folder / "var" / "digestbot-unsubscribes.sqlite3", timeout=30)
    try:
        journal.execute("BEGIN EXCLUSIVE")
        assert press(browser, "button", text="Unsubscribe") == "Unsubscribe?"
        said = text_of(browser)
        assert "We could not record your request just now. Please try again in a minute." in said
        audited("unsubscribe page, journal busy")
    finally:
        journal.rollback()
        journal.close()
    assert press(browser, "button", text="Unsubscribe") == "You are unsubscribed"
    eventually(
        lambda: site.subscriber("nils@example.org").status is SubscriberStatus.UNSUBSCRIBED, "unsubscribe applied"
    )


def _verdict(site: Site, subscriber_id: int) -> dict[int, str]:
    query = select(Feedback.entry_id, Feedback.verdict).where(Feedback.subscriber_id == subscriber_id)
    with site.factory() as session:
        return {entry_id: verdict for entry_id, verdict in session.execute(query)}


def test_rating_from_the_mail_and_the_web_version(site: Site, browser: Any, audited: Callable[[str], None]) -> None:
    site.add("barbara@example.org", "--filter", "*", "--backfill", "all")
    site.cli("send-now", "barbara@example.org")
    barbara = site.subscriber("barbara@example.org")
    mail = site.wait_for_mail("barbara@example.org")
    html_part = mail.get_body(("html",))
    assert html_part is not None
    page = html_part.get_content()
    more = re.search(r'href="(http://127\.0\.0\.1:\d+/d/[^"]+/2/more)"', page)
    assert more, page[:3000]
    as_delivered = site.folder / "barbara.html"
    as_delivered.write_text(page, encoding="utf-8")
    browser.get(as_delivered.as_uri())
    audited("the digest as mailed")

    browser.get(more.group(1))
    assert heading(browser) == "More like this?"
    audited("rating page")
    assert _verdict(site, barbara.id) == {}  # a link scanner's GET records nothing
    press(browser, "button", text="More like this")
    assert "Noted: more like this." in text_of(browser)
    (entry_id,) = _verdict(site, barbara.id)
    assert _verdict(site, barbara.id) == {entry_id: "more"}
    audited("rating page, rated")
    press(browser, "button", text="Undo")
    assert _verdict(site, barbara.id) == {}
    browser.get(more.group(1).replace("/2/more", "/2/less"))
    assert heading(browser) == "Less like this?"
    press(browser, "button", text="Less like this")
    assert _verdict(site, barbara.id) == {entry_id: "less"}
    press(browser, "button", text="Undo")
    assert _verdict(site, barbara.id) == {}

    web = re.search(r'href="(http://127\.0\.0\.1:\d+/d/[^"/]+/\d{4}-\d\d-\d\d)"', page)
    assert web
    browser.get(web.group(1))
    audited("web version")
    press(browser, "#e3 button", text="Less like this")
    assert "Noted: less like this." in text_of(browser)
    assert list(_verdict(site, barbara.id).values()) == ["less"]
    browser.get(web.group(1))
    assert "You asked for less like this." in text_of(browser)
    audited("web version after a rating")
    press(browser, "#e3 button", text="Undo")
    assert _verdict(site, barbara.id) == {}


def test_the_feed_link_on_the_manage_page_opens_the_readers_papers(
    site: Site, browser: Any, audited: Callable[[str], None]
) -> None:
    """The manage page a digest links to offers the reader's Atom feed; clicking it opens
    the feed, which lists the papers that digest carried."""
    import feedparser
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    site.add("felix@example.org", "--filter", "*", "--backfill", "all")
    site.cli("send-now", "felix@example.org")
    mail = site.wait_for_mail("felix@example.org")
    html_part = mail.get_body(("html",))
    assert html_part is not None
    manage = re.search(r'href="(http://127\.0\.0\.1:\d+/m/[^"]+)"', html_part.get_content())
    assert manage
    browser.get(manage.group(1))
    assert heading(browser) == "Your digest"
    audited("manage page with the feed link")
    link = again(lambda: browser.find_element(By.LINK_TEXT, "your papers as an Atom feed"))
    href = link.get_attribute("href")
    assert href.endswith(".atom")
    again(link.click)
    WebDriverWait(browser, 20).until(lambda d: d.current_url == href)
    # Chromium shows an Atom document as its text (a feed program reads the same bytes).
    shown = browser.execute_script(
        "const pre = document.querySelector('pre');"
        "return pre ? pre.textContent : new XMLSerializer().serializeToString(document);"
    )
    feed = feedparser.parse(shown)
    assert not feed.bozo and feed.entries, shown[:500]
    plain = mail.get_body(("plain",))
    assert plain is not None
    mailed = " ".join(plain.get_content().split())
    assert all(" ".join(entry.title.split())[:40] in mailed for entry in feed.entries)


def test_an_old_mails_web_version_says_it_is_no_longer_kept(
    site: Site, browser: Any, audited: Callable[[str], None]
) -> None:
    """A link from a mail older than ``database.keep_days``: after retention removed that
    digest, the page says so instead of "link not found"."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from bot.store.schema import Digest

    token = site.add("old-mail@example.org", "--filter", "*", "--backfill", "all")
    site.cli("send-now", "old-mail@example.org")
    site.wait_for_mail("old-mail@example.org")
    reader = site.subscriber("old-mail@example.org")
    long_ago = datetime.now(UTC) - timedelta(days=400)
    with site.factory() as session, session.begin():
        session.execute(
            update(Digest)
            .where(Digest.subscriber_id == reader.id)
            .values(planned_at=long_ago, local_date=long_ago.date())
        )
    browser.get(f"{site.url}/d/{token}/{long_ago.date().isoformat()}")
    assert heading(browser) not in ("Link not found", "This digest is no longer kept")  # the digest itself
    assert "removed 1 digest" in site.cli("db", "prune")
    browser.get(f"{site.url}/d/{token}/{long_ago.date().isoformat()}")
    assert heading(browser) == "This digest is no longer kept"
    assert "Digests are kept for 365 days" in text_of(browser)
    audited("a digest no longer kept")
    browser.get(f"{site.url}/d/{token}/{(long_ago + timedelta(days=1)).date().isoformat()}")
    assert heading(browser) == "This digest is no longer kept"
    browser.get(f"{site.url}/d/{token}/{datetime.now(UTC).date().isoformat()}")
    assert heading(browser) == "Link not found"  # nothing was sent that day


# --- what another site can and cannot do --------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    pages: dict[str, str] = {}
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append((self.path, self.headers.get("Referer")))
        body = self.pages.get(self.path, "<!DOCTYPE html><title>elsewhere</title><h1>elsewhere</h1>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[str]:
    """Another site (http://localhost:PORT): another origin and another site than
    http://127.0.0.1, the pages' own."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{server.server_address[1]}"
    server.shutdown()


def _attack(action: str, fields: dict[str, str], *, multipart: bool = False) -> str:
    inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
    kind = ' enctype="multipart/form-data"' if multipart else ""
    return (
        f'<!DOCTYPE html><html lang="en"><title>win a prize</title><form method="post" action="{action}"{kind}>'
        f'{inputs}<button type="submit">Win</button></form></html>'
    )


def test_a_form_on_another_site_changes_nothing(site: Site, browser: Any, elsewhere: str) -> None:
    """Even knowing the token and the form token (the worst case), a form another site
    serves is refused: the browser says where it comes from."""
    from bot.web.forms import form_token

    token = site.add("mallory-victim@example.org", "--filter", "*", "--backfill", "all")
    victim = site.subscriber("mallory-victim@example.org")
    site.cli("send-now", "mallory-victim@example.org")
    site.wait_for_mail("mallory-victim@example.org")
    form = form_token(KEY.encode(), token)
    today = date.today().isoformat()
    _Recorder.pages = {
        "/pause": _attack(f"{site.url}/m/{token}", {"form": form, "action": "pause"}),
        "/filter": _attack(f"{site.url}/m/{token}", {"form": form, "action": "filter", "filter": "nothing"}),
        "/rate": _attack(f"{site.url}/d/{token}/{today}/1/more", {"form": form, "action": "more"}),
        "/library": _attack(f"{site.url}/m/{token}", {"form": form}, multipart=True),
        "/subscribe": _attack(f"{site.url}/subscribe", {"email": "someone@example.org", "tag": "gpu"}),
    }
    for path in _Recorder.pages:
        browser.get(elsewhere + path)
        assert press(browser, "button", text="Win") == "Please use the page itself", path
    assert site.subscriber("mallory-victim@example.org") == victim
    assert _verdict(site, victim.id) == {}
    with site.factory() as session:
        assert get_subscriber(session, "someone@example.org") is None


def test_no_link_token_reaches_another_site(site: Site, browser: Any, elsewhere: str) -> None:
    """The pages' URLs hold the reader's token: a link to arXiv, GitHub or a DOI from the
    web version, or from the manage page, sends no Referer with it."""
    token = site.add("referer@example.org", "--filter", "*", "--backfill", "all")
    site.cli("send-now", "referer@example.org")
    site.wait_for_mail("referer@example.org")
    _Recorder.seen.clear()
    browser.get(f"{site.url}/d/{token}/{date.today().isoformat()}")
    # The first link out of the site, pointed at the other site: the page's own policy applies.
    browser.execute_script(
        "const a = [...document.querySelectorAll('a')].find(a => !a.href.startsWith(location.origin));"
        "a.href = arguments[0]; a.removeAttribute('target');",
        elsewhere + "/paper",
    )
    from selenium.webdriver.common.by import By

    outbound = [a for a in browser.find_elements(By.TAG_NAME, "a") if a.get_attribute("href") == elsewhere + "/paper"]
    outbound[0].click()
    eventually(lambda: any(path == "/paper" for path, _ in _Recorder.seen), "the other site was visited")
    assert [referer for path, referer in _Recorder.seen if path == "/paper"] == [None]


# --- digests at their richest ----------------------------------------------------------------


def test_a_rich_digest_and_its_web_version_pass_axe(
    browser: Any, audited: Callable[[str], None], tmp_path: Path
) -> None:
    if axe_missing() is not None:
        pytest.skip(str(axe_missing()))
    mailed, web = rich_digest()
    assert "Top picks for you" in mailed and "Updated since we sent it" in mailed and "Your library" in mailed
    assert "You asked for more like this." in web
    in_sections, _ = rich_digest(sections=True)
    assert "Spiking &lt;FPGA&gt;" in in_sections and "GPUs &amp; more" in in_sections
    for name, page in (("rich digest", mailed), ("rich web version", web), ("digest in sections", in_sections)):
        path = tmp_path / f"{name.replace(' ', '-')}.html"
        path.write_text(page, encoding="utf-8")
        browser.get(path.as_uri())
        audited(name)


def test_headings_step_down(site: Site, browser: Any) -> None:
    """The manage page's section headings are smaller than its title."""
    token = site.add("headings@example.org")
    browser.get(f"{site.url}/m/{token}")
    sizes = browser.execute_script(
        "return ['h1', 'h2'].map(t => parseFloat(getComputedStyle(document.querySelector(t)).fontSize))"
    )
    assert sizes[0] > sizes[1], sizes


def test_the_manage_page_right_after_a_digest_says_so(site: Site, browser: Any, audited: Callable[[str], None]) -> None:
    """Issue 76, item 5: right after a digest the manage page said "nothing new has arrived
    since 24 November 2026" (its window's start), as if nothing had been sent."""
    site.add("lamarr@example.org", "--filter", "*", "--backfill", "all")
    site.cli("send-now", "lamarr@example.org")
    mail = site.wait_for_mail("lamarr@example.org")
    html_part = mail.get_body(("html",))
    assert html_part is not None
    manage = re.search(r'href="(http://127\.0\.0\.1:\d+/m/[^"]+)"', html_part.get_content())
    assert manage
    browser.get(manage.group(1))
    shown = " ".join(text_of(browser).split())
    assert "since your digest of" in shown, shown
    audited("manage page right after a digest")
