"""Screens of the demo's richest digest, at a phone's width and a desktop's, for people to
look at (`make screens`).

Usage: python bench/screens.py [--inbox var/inbox] [--out var/screens]

Takes the message in --inbox (`make demo` writes it) with the most entries, lays its HTML
part out in headless Chromium (Debian's `chromium`) 375 and 1,200 px wide, and writes
`digest-375.png` and `digest-1200.png` to --out.  Chromium's window is at least 500 px
wide, so the digest is laid out in a frame of the width wanted and the screenshot is cut
to it.
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
import tempfile
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path

WIDTHS = (375, 1200)
FRAME = """<!DOCTYPE html><html><body style="margin:0">
<iframe src="{src}" style="width:{width}px;height:{height}px;border:0;display:block"></iframe>
<script>
window.addEventListener("message", (event) => {{
  const out = document.createElement("pre"); out.id = "height"; out.textContent = event.data;
  document.body.appendChild(out);
}});
</script></body></html>"""
HEIGHT_PROBE = """<script>
window.addEventListener("load", () => parent.postMessage(String(document.documentElement.scrollHeight), "*"));
</script>"""


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


def chromium(browser: str, *args: str) -> str:
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inbox", type=Path, default=Path("var/inbox"))
    parser.add_argument("--out", type=Path, default=Path("var/screens"))
    args = parser.parse_args()
    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if browser is None:
        sys.exit("no chromium here (Debian: apt-get install chromium)")
    source, page = richest(args.inbox)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "digest.html").write_text(page.replace("</body>", HEIGHT_PROBE + "</body>"), encoding="utf-8")
        for width in WIDTHS:
            frame = folder / f"frame-{width}.html"
            frame.write_text(FRAME.format(src="digest.html", width=width, height=900), encoding="utf-8")
            dom = chromium(
                browser, "--window-size=1300,1000", "--virtual-time-budget=3000", "--dump-dom", frame.as_uri()
            )
            found = re.search(r'<pre id="height">(\d+)</pre>', dom)
            height = int(html.unescape(found.group(1))) if found else 4000
            frame.write_text(FRAME.format(src="digest.html", width=width, height=height), encoding="utf-8")
            target = (args.out / f"digest-{width}.png").resolve()
            chromium(
                browser,
                f"--window-size={width},{height}",
                "--virtual-time-budget=3000",
                f"--screenshot={target}",
                frame.as_uri(),
            )
            print(f"{target} ({width} x {height} px) from {source}")


if __name__ == "__main__":
    main()
