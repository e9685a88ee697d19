"""Issue 76, item 1: the demo's mail showed only "Unsubscribe" (no public URL, so no
"More like this", no manage link, no web version).  Now it links to `digestbot serve`'s
own address, and with `serve` on the demo's store the links answer: the first mail
opened in Chromium, its "More like this" clicked, the rating recorded; the manage page
reached from the same mail."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from bot.tools.sink import free_port
from tests.browser import browser_missing, chromium
from tests.conftest import ROOT
from tests.helpers import DIGESTBOT, wait_until_serving
from tests.test_pages_in_a_browser import heading, press, text_of

pytestmark = [pytest.mark.slow, pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def test_the_demos_mail_links_answer_when_clicked(tmp_path: Path, browser: Any) -> None:
    for folder in ("seeds", "config"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env |= {"HOME": str(tmp_path), "DIGESTBOT_WEB__LISTEN_PORT": str(port)}
    shown = subprocess.run([DIGESTBOT, "demo"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    said = " ".join(shown.stdout.split())
    assert f"answer at http://127.0.0.1:{port} while this runs" in said, said
    env["DIGESTBOT_DATABASE__URL"] = f"sqlite:///{tmp_path / 'var' / 'demo.sqlite3'}"
    server = subprocess.Popen([DIGESTBOT, "serve"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_serving(server, port)
        browser.get((tmp_path / "var" / "inbox" / "0001.html").as_uri())
        more = browser.find_elements(By.LINK_TEXT, "More like this")
        manage = browser.find_element(By.LINK_TEXT, "Manage your subscription").get_attribute("href")
        assert more, "the demo's mail has no More like this"
        more[0].click()
        assert heading(browser) == "More like this?"
        press(browser, "button", text="More like this")
        assert "Noted: more like this." in text_of(browser)
        browser.get(manage)
        assert "Your library" in text_of(browser) or "filter" in text_of(browser).lower()
    finally:
        server.terminate()
        _, errors = server.communicate(timeout=30)
    assert "Traceback" not in errors, errors[-3000:]
