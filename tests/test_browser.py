"""What a person sees: worst-case digests laid out by headless Chromium at a phone's
width and a desktop's.  Needs Debian's ``chromium`` (``.ci/run`` installs it)."""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
from datetime import date
from pathlib import Path

import pytest

from bot.domain import DigestContent, DigestItem, EntryKind
from bot.mail.render import Renderer, web_links
from tests.conftest import ROOT
from tests.helpers import digest_item, reader, settings_for

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium here (Debian: apt-get install chromium; .ci/run installs it)"
)

# Measures the laid-out page once it has loaded and writes what it found into the DOM,
# which --dump-dom prints.
PROBE = """<script>
window.addEventListener("load", () => {
  const width = window.innerWidth, wide = [];
  for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.width > 0 && (box.right > width + 0.5 || box.left < -0.5)) {
      wide.push(`${el.tagName}.${el.className} ${Math.round(box.left)}..${Math.round(box.right)}`);
    }
  }
  // A menu whose chosen option's words do not fit its box (past the arrow) is cut.
  const measure = document.createElement("canvas").getContext("2d"), clipped = [];
  for (const select of document.querySelectorAll("select")) {
    const style = getComputedStyle(select);
    measure.font = `${style.fontSize} ${style.fontFamily}`;
    const label = select.options[select.selectedIndex]?.text || "";
    const room = select.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 24;
    if (measure.measureText(label).width > room) clipped.push(`${select.name}: ${label}`);
  }
  const found = {
    width, scrollWidth: document.documentElement.scrollWidth, wide: wide.slice(0, 10), clipped,
    links: [...document.querySelectorAll("a")].map(a => a.getAttribute("href")),
    contents: document.querySelectorAll(".toc li").length,
    entries: document.querySelectorAll(".entry").length,
  };
  parent.postMessage(JSON.stringify(found), "*");
});
</script>"""

# Chromium's window is at least 500 px wide: the digest is laid out in a frame of the
# width under test, and the frame's measurement is written where --dump-dom prints it.
FRAME = """<!DOCTYPE html><html><body style="margin:0">
<iframe src="{src}" style="width:{width}px;height:900px;border:0"></iframe>
<script>
window.addEventListener("message", (event) => {{
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = event.data;
  document.body.appendChild(out);
}});
</script></body></html>"""

LONG_WORD = "Supercalifragilistic" * 15  # 300 characters, no break
LONG_URL = "https://example.org/" + "/".join(f"segment{n}" for n in range(30)) + "?q=" + "x" * 80


def _item(n: int, summary: str, summary_type: str = "text/plain", **fields: object) -> DigestItem:
    values: dict[str, object] = {
        "key": f"k{n}",
        "kind": EntryKind.PAPER,
        "title": f"Entry {n}: {LONG_WORD} and $O(n \\log n)$ " + "long title words " * 10,
        "authors": tuple(f"Author{a} {LONG_WORD[:40]}" for a in range(12)),
        "published": date(2026, 6, 14),
        "summary": summary,
        "summary_type": summary_type,
        "tags": tuple(f"tag{t}-{LONG_WORD[:30]}" for t in range(8)),
        "why": f'"{LONG_WORD[:60]}": phrase in title',
        "arxiv_id": f"2606.{n:05d}",
        "doi": None,
        "links": (),
    }
    values.update(fields)
    return digest_item(**values)


def _worst_cases() -> list[DigestContent]:
    items = (
        _item(1, f"A summary with {LONG_WORD} and a link {LONG_URL} in it. " * 3),
        _item(
            2,
            f"<p>HTML with <code>{LONG_WORD}</code>, <a href='{LONG_URL}'>{LONG_URL}</a></p>"
            f"<pre>{'wide_preformatted_line ' * 12}{LONG_WORD}</pre>"
            f"<blockquote>{LONG_WORD}</blockquote><ul><li>{LONG_WORD}</li></ul>",
            "text/html",
        ),
        _item(3, "Short one.", kind=EntryKind.REPO, extra=(("owner", LONG_WORD), ("description", LONG_WORD))),
        *(_item(n, "One sentence. " * 60) for n in range(4, 31)),
    )
    subscriber = reader(
        7,
        email="a-very-long-local-part-for-testing@" + "sub." * 10 + "example.org",
        filter=f'"{LONG_WORD[:60]}" or gpu',
    )
    return [
        DigestContent(digest_id=1, kind="scheduled", local_date=date(2026, 6, 15), subscriber=subscriber, items=items),
        DigestContent(
            digest_id=2, kind="scheduled", local_date=date(2026, 6, 15), subscriber=subscriber, items=items[:4]
        ),
    ]


def _laid_out(page: Path, width: int) -> dict[str, object]:
    assert CHROMIUM is not None
    frame = page.with_suffix(f".{width}.frame.html")
    frame.write_text(FRAME.format(src=page.name, width=width), encoding="utf-8")
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={max(width, 500) + 100},1000",
            "--virtual-time-budget=3000",
            "--dump-dom",
            frame.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found is not None, f"chromium printed no measurement (rc {done.returncode}): {done.stderr[-500:]}"
    result: dict[str, object] = json.loads(html_lib.unescape(found.group(1)))
    return result


@pytest.mark.parametrize("width", [375, 1200])
def test_worst_case_digests_fit_the_screen(tmp_path: Path, width: int) -> None:
    renderer = Renderer(ROOT / "templates", search_url="https://arxiv.org/search/?query={title}")
    links = web_links("https://digest.example.org", "7.AAAAAAAAAAAAAAAAAAAAAAAA")
    for content in _worst_cases():
        page = tmp_path / f"digest-{content.digest_id}.html"
        page.write_text(renderer.render(content, links).html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
        seen = _laid_out(page, width)
        assert seen["width"] == width
        assert seen["scrollWidth"] == width and seen["wide"] == [], seen  # no horizontal scrolling
        hrefs = seen["links"]
        assert isinstance(hrefs, list) and hrefs
        assert all(re.match(r"(https:|mailto:|#e\d+$)", h) for h in hrefs), [
            h for h in hrefs if not h.startswith("https:")
        ]
        assert seen["contents"] == seen["entries"] == len(content.items)


@pytest.mark.parametrize("width", [375, 1200])
def test_the_inbox_index_fits_a_phone(tmp_path: Path, width: int) -> None:
    """The page `digestbot demo` and `digestbot sink` write: each message's subject links
    to its HTML part, with its .eml beside it, and nothing scrolls sideways."""
    from email.message import EmailMessage

    from bot.tools.inbox_index import write_index

    for n in range(1, 4):
        message = EmailMessage()
        message["Subject"] = f"{n} new entries: {LONG_WORD} " + "tag, " * 20
        message["To"] = "a-very-long-local-part-for-testing@" + "sub." * 10 + "example.org"
        message["Date"] = "Sun, 14 Jun 2026 12:00:00 +0000"
        message.set_content("text")
        message.add_alternative(f"<p>{LONG_WORD}</p>", subtype="html")
        (tmp_path / f"{n:04d}.eml").write_bytes(message.as_bytes())
    index = write_index(tmp_path)
    assert "prefers-color-scheme:dark" in index.read_text()  # the index follows a dark scheme too
    index.write_text(index.read_text().replace("</html>", PROBE + "</html>"), encoding="utf-8")
    seen = _laid_out(index, width)
    assert seen["scrollWidth"] == width and seen["wide"] == [], seen
    hrefs = seen["links"]
    assert isinstance(hrefs, list)
    assert hrefs == ["0003.html", "0003.eml", "0002.html", "0002.eml", "0001.html", "0001.eml"]


def _subscriber_pages(folder: Path) -> dict[str, str]:
    """The sign-up page and a manage page at their worst (long tags, address, filter and
    titles), as the real endpoint serves them."""
    from bot.ingest.storing import ingest_bytes
    from bot.store.engine import make_engine, sessions, upgrade
    from bot.store.subscribers import get_subscriber
    from bot.subscribers.fields import clean_fields
    from bot.subscribers.subscriptions import save
    from bot.tokens import make_token, signing_key
    from bot.web import create_app
    from tests.helpers import Server, render_dump

    engine = make_engine(f"sqlite:///{folder / 'store.sqlite3'}")
    upgrade(engine)
    factory = sessions(engine)
    settings = settings_for(
        folder, web={"public_url": "https://digest.example.org", "signing_key": "b" * 32, "signup": True}
    )
    tags = [f"tag{n}-{LONG_WORD[:40]}" for n in range(70)]
    papers = [(f"Paper {n}: {LONG_WORD}", ["Ada"], date(2026, 6, 14), f"About {LONG_WORD}.") for n in range(12)]
    from datetime import UTC, datetime

    now = datetime(2026, 6, 14, 12, tzinfo=UTC)
    ingest_bytes(factory, render_dump(papers, tags).encode(), name="wide", now=now, rules=None)
    address = "a-very-long-local-part-for-testing@" + "sub." * 10 + "example.org"
    wanted = f'"{LONG_WORD[:80]}" or ' + " or ".join(tags[:3])
    save(
        factory,
        settings,
        [clean_fields(address, filter=wanted, cadence="feed", timezone="America/Argentina/ComodRivadavia")],
        now,
    )
    with factory() as session:
        found = get_subscriber(session, address)
    assert found is not None
    token = make_token(signing_key(settings), found.id, found.unsubscribe_secret)
    with Server(create_app(settings, factory, clock=lambda: now)) as web:
        pages = {"signup": web.get("/subscribe").text, "manage": web.get(f"/m/{token}").text}
    engine.dispose()
    return pages


def _screenshot(page: Path, width: int, out: Path) -> tuple[int, int]:
    """A PNG of *page* laid out *width* px wide (in a frame: Chromium's window is wider);
    its size in pixels."""
    assert CHROMIUM is not None
    frame = page.with_suffix(f".{width}.shot.html")
    frame.write_text(
        f'<!DOCTYPE html><html><body style="margin:0"><iframe src="{page.name}" '
        f'style="width:{width}px;height:1600px;border:0;display:block"></iframe></body></html>',
        encoding="utf-8",
    )
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={width},1600"]
        + ["--virtual-time-budget=3000", f"--screenshot={out}", frame.as_uri()],
        capture_output=True,
        timeout=60,
        check=False,
    )
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.parametrize("width", [375, 1200])
@pytest.mark.slow
def test_the_sign_up_and_manage_pages_fit_the_screen(tmp_path: Path, width: int) -> None:
    for name, text in _subscriber_pages(tmp_path).items():
        assert 'name="tag"' in text and 'name="timezone"' in text, name
        page = tmp_path / f"{name}.html"
        page.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
        seen = _laid_out(page, width)
        assert seen["width"] == width
        assert seen["scrollWidth"] == width and seen["wide"] == [], (name, seen)
        assert seen["clipped"] == [], (name, seen["clipped"])  # no option cut short ("in a feed only (n")
        shot = tmp_path / f"{name}-{width}.png"
        assert _screenshot(page, width, shot)[0] >= width


@pytest.mark.parametrize("width", [375, 1200])
def test_the_web_version_with_its_rating_buttons_fits_the_screen(tmp_path: Path, width: int) -> None:
    """The web version's "more like this" / "less like this" buttons (and an undo where
    the reader said one already) beside the worst-case entries, and Top picks above."""
    from dataclasses import replace

    renderer = Renderer(
        ROOT / "templates", search_url="https://arxiv.org/search/?query={title}", fit=False, top_picks=3
    )
    links = web_links("https://digest.example.org", "7.AAAAAAAAAAAAAAAAAAAAAAAA")
    content = _worst_cases()[0]
    close = "; close to: 'A paper of the reader's library' from your library"
    scored = tuple(replace(item, taste=n / 10, why=item.why + close) for n, item in enumerate(content.items))
    context = renderer.context(replace(content, items=scored), links)
    context.update(form_token="0" * 32, verdicts={2: "more"})
    page = tmp_path / "web-version.html"
    html = renderer.render_context(context).html
    assert html.count(">More like this</button>") == len(scored) - 1 and html.count(">Undo</button>") == 1
    assert "Top picks for you" in html
    page.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    seen = _laid_out(page, width)
    assert seen["scrollWidth"] == width and seen["wide"] == [], seen
    shot = tmp_path / f"web-version-{width}.png"
    assert _screenshot(page, width, shot)[0] >= width
