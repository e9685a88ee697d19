"""A reader's Zotero library, used the way a person uses it: headless Chromium connecting
a library on the manage page of ``digestbot serve`` (a process), saving an entry from
the mail, disconnecting; the Zotero server is ``tests/zotero_server.py`` (a process).
Every page is audited with axe-core, and the key is looked for everywhere it must never
be: the pages, the store's files, a backup, an export, the configuration, the logs."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import test_pages_in_a_browser as pages
from tests.browser import browser_missing
from tests.helpers import DIGESTBOT
from tests.test_pages_in_a_browser import (
    Site,
    eventually,
    heading,
    press,
    serving,
    text_of,
    type_into,
)
from tests.zotero_server import ZoteroServer, zotero_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing())),
]
USER = 501
browser, audited = pages.browser, pages.audited  # the fixtures of the pages' tests, here too


@pytest.fixture(scope="module")
def zotero() -> Iterator[ZoteroServer]:
    with zotero_server() as running:
        yield running


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, zotero: ZoteroServer) -> Iterator[Site]:
    with serving(tmp_path_factory.mktemp("zotero-site"), f'[zotero]\nbase_url = "{zotero.url}"\n') as running:
        yield running


def _feedback(site: Site, email: str) -> list[str]:
    return site.cli("subscribers", "library", "feedback", email, "--json").splitlines()


def test_connect_save_and_disconnect_by_clicking(
    site: Site, zotero: ZoteroServer, browser: Any, audited: Callable[[str], None]
) -> None:
    token = site.add("zoe@example.org", "--filter", "*", "--backfill", "all")
    key = zotero.key(USER, write=True)
    library = f"users/{USER}"
    zotero.control("add", library=library, items=[{"title": "A paper Zoe keeps", "DOI": "10.1000/zoe"}])
    browser.get(f"{site.url}/m/{token}")
    assert "Connect your Zotero library" in text_of(browser)
    audited("manage page, no Zotero library")

    type_into(browser, "#zotero_key", "Z" * 24)  # a key Zotero never made
    press(browser, "#zotero button", text="Connect")
    assert "Not connected: Zotero does not know that key" in text_of(browser)
    audited("manage page, a key refused")
    type_into(browser, "#zotero_key", key)
    press(browser, "#zotero button", text="Connect")
    said = text_of(browser)
    assert "Connected to your library: digestbot can read and save to your library." in said
    audited("manage page, connected")
    assert key not in browser.page_source

    synced = site.cli("library", "sync", "zoe@example.org")
    assert "zoe@example.org: 1 papers added, 0 removed" in synced
    assert "doi:10.1000/zoe" in site.cli("library", "list", "zoe@example.org")

    site.cli("send-now", "zoe@example.org")
    mail = site.wait_for_mail("zoe@example.org")
    html_part, text_part = mail.get_body(("html",)), mail.get_body(("plain",))
    assert html_part is not None and text_part is not None
    page = html_part.get_content()
    saving = re.search(r'href="(http://127\.0\.0\.1:\d+/d/[^"]+/2/zotero)"[^>]*>Save to Zotero<', page)
    assert saving, page[:3000]
    assert f"Save to Zotero: {saving.group(1)}" in text_part.get_content()
    made_before = len(zotero.items(library))

    browser.get(saving.group(1))
    assert heading(browser) == "Save to Zotero?"
    audited("save page")
    assert len(zotero.items(library)) == made_before and _feedback(site, "zoe@example.org") == []
    press(browser, "button", text="Save to my Zotero library")
    assert "Will be saved to your Zotero library within a minute." in text_of(browser)
    audited("save page, saved")
    # The endpoint takes the journaled ask at once: a like, and a paper of their library.
    eventually(lambda: len(_feedback(site, "zoe@example.org")) == 1, "the save counted as a like")
    assert '"verdict": "more"' in _feedback(site, "zoe@example.org")[0]
    site.cli("library", "sync", "zoe@example.org")  # the daemon's pass, by hand: the item is written
    assert len(zotero.items(library)) == made_before + 1
    browser.get(saving.group(1))
    assert "Saved to your Zotero library." in text_of(browser)
    press(browser, "a", text="Back to the digest")
    assert "Save to Zotero" in text_of(browser)  # the web version offers it too
    audited("web version with Save to Zotero")

    backup = site.folder / "backup.sqlite3"
    outputs = [
        site.cli("subscribers", "export"),
        site.cli("subscribers", "show", "zoe@example.org"),
        site.cli("config", "show"),
        site.cli("db", "backup", str(backup)),
        site.cli("stats"),
    ]
    feed = re.search(r'href="([^"]+\.atom)"', browser.page_source) or re.search(r"http://[^\s\"]+\.atom", page)
    browser.get(f"{site.url}/m/{token}")
    press(browser, "#zotero button", text="Disconnect")
    assert "Disconnected: your Zotero key is forgotten." in text_of(browser)
    assert "Connect your Zotero library" in text_of(browser)
    audited("manage page, disconnected")
    files = [p for p in site.folder.rglob("*") if p.is_file()]
    assert backup in files and any(p.name.endswith("-unsubscribes.sqlite3") for p in files)
    for path in files:
        assert key.encode() not in path.read_bytes(), path
    for said in [*outputs, page, text_part.get_content()]:
        assert key not in said
    assert feed is None or key not in feed.group(0)


def test_an_operator_connects_from_a_key_file_and_a_revoked_key_breaks_it(site: Site, zotero: ZoteroServer) -> None:
    """The key from a file, never the command line; a key revoked since breaks the
    connection, which ``library sync`` and ``subscribers show`` say without the key."""
    key = zotero.key(USER + 1, write=False)
    (site.folder / "zotero.key").write_text(key + "\n", encoding="utf-8")
    site.add("yan@example.org", "--filter", "*")
    connected = site.cli("subscribers", "edit", "yan@example.org", "--zotero-key-file", str(site.folder / "zotero.key"))
    assert "Zotero your library connected (read only)" in connected
    zotero.control("revoke", key=key)
    run = subprocess.run(
        [DIGESTBOT, "library", "sync", "yan@example.org"],
        cwd=site.folder,
        env=site.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and "connection broken" in run.stdout and key not in run.stdout + run.stderr
    shown = site.cli("subscribers", "show", "yan@example.org")
    assert key not in shown
    log = Path(site.folder / "var")
    for path in log.rglob("*.log"):
        assert key not in path.read_text(encoding="utf-8", errors="replace")
