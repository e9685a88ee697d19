"""Screens of what a person sees, at a phone's width and a desktop's, in light and dark
mode, for people to look at (`make screens`, after `make demo`).

Usage: python bench/screens.py [--var var] [--out var/screens]

Serves a copy of the demo's store (`var/demo.sqlite3`) with the real endpoint on
127.0.0.1, opens in headless Chromium (Debian's `chromium` and `chromium-driver`) the
sign-up page, Ada's manage page (as it is, and with her cadence set to the feed only),
the rating page of her richest digest's first entry and its web version, the richest
digest as mailed (`var/inbox`), and `digestbot stats --html` of a store holding 90 days
of a list's life (`tests/list_history.py`), and writes one PNG of each page in each mode
to --out: `signup-375-light.png` ... `list-1200-dark.png`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.config import Settings  # noqa: E402
from bot.domain import DigestState  # noqa: E402
from bot.reports.list_picture import gather, page  # noqa: E402
from bot.store.digests import list_digests  # noqa: E402
from bot.store.engine import make_engine, sessions, upgrade  # noqa: E402
from bot.store.subscribers import get_subscriber  # noqa: E402
from bot.tokens import make_token, signing_key  # noqa: E402
from bot.tools.sink import free_port  # noqa: E402
from bot.web import create_app  # noqa: E402
from tests.browser import MODES, browser_missing, chromium, screenshot  # noqa: E402
from tests.helpers import Server  # noqa: E402
from tests.list_history import fill_history  # noqa: E402

READER = "ada@example.org"


def richest(inbox: Path) -> tuple[Path, str]:
    """The message with the most entries, and its HTML part."""
    best: tuple[int, Path, str] | None = None
    for path in sorted(inbox.glob("*.eml")):
        message = BytesParser(policy=policy.default).parsebytes(path.read_bytes())
        part = message.get_body(("html",)) if isinstance(message, EmailMessage) else None
        if part is None:
            continue
        page = part.get_content()
        entries = page.count('class="entry"')
        if best is None or entries > best[0]:
            best = (entries, path, page)
    if best is None:
        raise SystemExit(f"no message with an HTML part in {inbox} (run `make demo` first)")
    return best[1], best[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--var", type=Path, default=Path("var"))
    parser.add_argument("--out", type=Path, default=Path("var/screens"))
    args = parser.parse_args()
    missing = browser_missing()
    if missing is not None:
        sys.exit(missing)
    store = args.var / "demo.sqlite3"
    if not store.is_file():
        sys.exit(f"no {store} (run `make demo` first)")
    source, mailed = richest(args.var / "inbox")
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()  # the pages' own origin: the manage page's form is posted below
    settings = Settings.model_validate(
        {"paths": {"var_dir": str(args.var)}, "web": {"signup": True, "public_url": f"http://127.0.0.1:{port}"}}
    )
    copy = Path(tempfile.mkdtemp(prefix="digestbot-screens-")) / "demo.sqlite3"
    shutil.copyfile(store, copy)  # Ada's cadence is changed below: never in the demo's own store
    engine = make_engine(f"sqlite:///{copy}")
    factory = sessions(engine)
    with factory() as session:
        ada = get_subscriber(session, READER)
        if ada is None:
            sys.exit(f"{READER} is not in {store} (run `make demo` first)")
        sent = [d for d in list_digests(session, subscriber_id=ada.id) if d.state is DigestState.SENT]
    token = make_token(signing_key(settings), ada.id, ada.unsubscribe_secret)
    day = max(sent, key=lambda d: d.entry_count).local_date.isoformat() if sent else None
    digest_file = (args.out / "digest.html").resolve()
    digest_file.write_text(mailed, encoding="utf-8")
    list_file = (args.out / "list.html").resolve()
    list_file.write_text(_list_picture(copy.with_name("history.sqlite3")), encoding="utf-8")
    with Server(create_app(settings, factory), port) as client, chromium() as browser:
        base = str(client.base_url).rstrip("/")
        pages = {
            "signup": f"{base}/subscribe",
            "manage": f"{base}/m/{token}",
            "digest": digest_file.as_uri(),
        }
        if day is not None:
            pages["web-version"] = f"{base}/d/{token}/{day}"
            pages["rating"] = f"{base}/d/{token}/{day}/1/more"
        pages["list"] = list_file.as_uri()
        for name, url in pages.items():
            _shoot(browser, name, url, args.out, f" from {source}" if name == "digest" else "")
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        browser.get(pages["manage"])  # as Ada would: the feed only, then Save
        menu = browser.find_element(By.CSS_SELECTOR, 'select[name="cadence"]')
        Select(menu).select_by_value("feed")
        menu.find_element(By.XPATH, "ancestor::form//button[@type='submit']").click()
        _shoot(browser, "manage-feed", pages["manage"], args.out, " (cadence: the feed only)")
    engine.dispose()


def _shoot(browser: object, name: str, url: str, out: Path, note: str) -> None:
    browser.get(url)  # type: ignore[attr-defined]
    for mode in MODES:
        target = out / f"{name}-{mode.width}-{'dark' if mode.dark else 'light'}.png"
        screenshot(browser, mode, target)
        print(f"{target.resolve()} ({mode}){note}")


def _list_picture(store: Path) -> str:
    """`digestbot stats --html` of a store made here with 90 days of a list's life."""
    engine = make_engine(f"sqlite:///{store}")
    upgrade(engine)
    factory = sessions(engine)
    now = datetime.now(UTC)
    fill_history(factory, now.date())
    with factory() as session:
        picture = gather(session, now.date(), keep_days=365, now=now)
    engine.dispose()
    return page(picture)


if __name__ == "__main__":
    main()
