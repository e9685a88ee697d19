"""A real browser for the tests (and ``bench/screens.py``): Debian's Chromium driven by
chromedriver through selenium, with axe-core to audit what it shows.

A page is tested the way a person uses it: typed into, clicked, its forms submitted by
the browser with the Origin, Sec-Fetch-* and cookie rules a browser applies.  axe-core
and the Nu HTML Checker (vnu) come from npm: ``make test`` installs them into
``.venv/node`` where npm is present (``DIGESTBOT_NODE_MODULES`` names another folder).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")
NODE_MODULES = Path(os.environ.get("DIGESTBOT_NODE_MODULES", ROOT / ".venv" / "node" / "node_modules"))
AXE = NODE_MODULES / "axe-core" / "axe.min.js"
VNU = NODE_MODULES / "vnu-jar" / "build" / "dist" / "vnu.jar"
JAVA = shutil.which("java")


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        return "no chromium and chromedriver here (Debian: apt-get install chromium chromium-driver; .ci/run does)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def axe_missing() -> str | None:
    if not AXE.is_file():
        return f"no axe-core at {AXE} (make test installs it with npm: npm install --prefix .venv/node axe-core)"
    return None


def vnu_missing() -> str | None:
    if JAVA is None:
        return "no java here for the Nu HTML Checker (Debian: apt-get install default-jre-headless)"
    if not VNU.is_file():
        return f"no vnu.jar at {VNU} (make test installs it with npm: npm install --prefix .venv/node vnu-jar)"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium under chromedriver, with an empty profile; quit afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # The flags the machine's notes give for a closed network and a root user.
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--hide-scrollbars",
        "--window-size=1200,900",
        "--lang=en-US",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@dataclass(frozen=True, slots=True)
class Mode:
    width: int
    dark: bool

    def __str__(self) -> str:
        return f"{self.width}px {'dark' if self.dark else 'light'}"


MODES = tuple(Mode(width, dark) for width in (375, 1200) for dark in (False, True))


def emulate(driver: Any, mode: Mode) -> None:
    """Lay the page out *mode.width* CSS px wide, in the colour scheme asked for."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": mode.width, "height": 900, "deviceScaleFactor": 1, "mobile": mode.width < 600},
    )
    scheme = "dark" if mode.dark else "light"
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
    )


def reset(driver: Any) -> None:
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


_RUN_AXE = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ["violations"]})
  .then(r => done(JSON.stringify(r.violations.map(v => ({
      id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.slice(0, 3).map(
        n => n.target.join(" ") + ": " + (n.failureSummary || "").split("\\n").slice(1, 2).join(""))
  })))))
  .catch(e => done(JSON.stringify([{id: "axe-error", help: String(e), nodes: []}])));
"""

_WIDTH = "return [window.innerWidth, document.documentElement.scrollWidth]"


def audit(driver: Any, name: str) -> list[str]:
    """axe-core's violations (all its rules but the experimental: WCAG 2.x A and AA and
    best practices) and sideways scrolling of the page shown now, in each of ``MODES``;
    one line per problem, empty when there is none."""
    source = AXE.read_text(encoding="utf-8")
    found: list[str] = []
    try:
        for mode in MODES:
            emulate(driver, mode)
            if not driver.execute_script("return typeof axe !== 'undefined'"):
                driver.execute_script(source)
            violations = json.loads(driver.execute_async_script(_RUN_AXE))
            found += [f"{name} at {mode}: {v['id']} ({v['help']}) {v['nodes']}" for v in violations]
            inner, scrolled = driver.execute_script(_WIDTH)
            if scrolled > inner:
                found.append(f"{name} at {mode}: scrolls sideways ({scrolled} px of content in {inner} px)")
    finally:
        reset(driver)
    return found


def screenshot(driver: Any, mode: Mode, out: Path) -> Path:
    """A PNG of the whole page shown now, laid out as *mode* says."""
    emulate(driver, mode)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {
            "width": mode.width,
            "height": max(400, min(height, 6000)),
            "deviceScaleFactor": 1,
            "mobile": mode.width < 600,
        },
    )
    out.write_bytes(driver.get_screenshot_as_png())
    reset(driver)
    return out


def vnu_errors(pages: dict[str, bytes], folder: Path) -> list[str]:
    """What the Nu HTML Checker reports as errors in each page (name -> the bytes served),
    one line each."""
    assert JAVA is not None
    folder.mkdir(parents=True, exist_ok=True)
    names: dict[str, str] = {}
    for n, (name, data) in enumerate(sorted(pages.items())):
        path = folder / f"page{n:03d}.html"
        path.write_bytes(data)
        names[path.name] = name
    done = subprocess.run(
        [JAVA, "-jar", str(VNU), "--errors-only", "--format", "json", *sorted(str(p) for p in folder.glob("*.html"))],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    messages = json.loads(done.stderr or done.stdout or '{"messages": []}')["messages"]
    found = []
    for m in messages:
        if m.get("type") in ("error", "non-document-error"):
            where = names.get(str(m.get("url", "")).rpartition("/")[2], m.get("url"))
            found.append(f"{where}:{m.get('lastLine', '?')}: {m.get('message')} [{m.get('extract', '')!r}]")
    return found
