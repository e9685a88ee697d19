"""Render stage: a ``DigestContent`` in, subject + plain text + HTML out.

Jinja2 templates from ``paths.templates_dir`` (autoescaped HTML, StrictUndefined),
one stylesheet inlined with css-inline, LaTeX in summaries turned into readable
text with pylatexenc, feed HTML sanitized with nh3.  Pure: never reads the
store, never sends.  The text conversions are pure and cached: a day's entries
are rendered for many subscribers.
"""

from __future__ import annotations

import html
import re
import textwrap
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote, quote_plus

import css_inline
import nh3
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape
from pylatexenc.latex2text import LatexNodes2Text

from bot.domain import DigestContent, DigestItem, EntryKind, EntryView, RenderedDigest
from bot.text import is_web_url, one_line

MAX_AUTHORS = 6
TEXT_FOOTER = "_footer.txt.j2"
_LATEX = LatexNodes2Text(math_mode="text", strict_latex_spaces=False)
_URL_RE = re.compile(r"https?://[^\s<>\"'\[\]()]+", re.IGNORECASE)  # in prose: stops at brackets
# Characters LaTeX treats specially that plain prose uses literally.
_BARE_SPECIALS = re.compile(r"(?<!\\)([%&#])")
_PLACEHOLDER = "zzlatexurl{}zz"
# A tag that ends a line of text.  Its attributes stop at the next "<" as well as at
# ">": with [^>]* an unclosed "<br<br<br..." rescanned the rest of the summary per tag.
_BLOCK_END = re.compile(r"<\s*(?:br|/p|/li|/blockquote)\b[^<>]*>", re.IGNORECASE)

ALLOWED_TAGS = {"p", "br", "b", "strong", "i", "em", "a", "ul", "ol", "li", "code", "pre", "sub", "sup", "blockquote"}
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}}
ALLOWED_SCHEMES = {"http", "https", "mailto"}


@lru_cache(maxsize=8192)
def latex_to_text(text: str) -> str:
    """Readable text from a summary that may carry LaTeX ("$1.45\\times$" -> "1.45×").

    Only text with a backslash or a dollar sign goes through pylatexenc; URLs
    are protected from it and bare %, & and # stay literal (in a dump they are
    prose: "67.2% and ..."), so nothing is ever lost."""
    if "\\" not in text and "$" not in text:
        return text
    urls: list[str] = []

    def stash(match: re.Match[str]) -> str:
        urls.append(match.group(0))
        return _PLACEHOLDER.format(len(urls) - 1)

    guarded = _BARE_SPECIALS.sub(r"\\\1", _URL_RE.sub(stash, text))
    try:
        converted = _LATEX.latex_to_text(guarded)
    except Exception:  # pylatexenc is lenient, but a summary must never break a digest
        return text
    converted = converted.replace("\u00a0", " ")
    for index, url in enumerate(urls):
        converted = converted.replace(_PLACEHOLDER.format(index), url)
    return str(converted)


@lru_cache(maxsize=8192)
def sanitize_html(fragment: str, *, remote_images: bool = False) -> str:
    """Feed HTML reduced to a small allow-list: no scripts, styles, forms or event
    handlers; images (remote by nature in a feed, so a tracking risk) only when
    *remote_images*, and then only https ones."""
    if not remote_images:
        return nh3.clean(
            fragment,
            tags=ALLOWED_TAGS,
            attributes=ALLOWED_ATTRIBUTES,
            url_schemes=ALLOWED_SCHEMES,
            link_rel="noopener noreferrer nofollow",
            strip_comments=True,
            url_relative="deny",  # a relative URL means nothing in a mailbox
        )
    return nh3.clean(
        fragment,
        tags=ALLOWED_TAGS | {"img"},
        attributes={**ALLOWED_ATTRIBUTES, "img": {"src", "alt", "width", "height"}},
        url_schemes=ALLOWED_SCHEMES,
        attribute_filter=_https_images_only,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
        url_relative="deny",  # a relative URL means nothing in a mailbox
    )


def _https_images_only(tag: str, attribute: str, value: str) -> str | None:
    if tag == "img" and attribute == "src" and not value.lower().startswith("https://"):
        return None
    return value


@lru_cache(maxsize=8192)
def html_to_text(fragment: str) -> str:
    blocky = _BLOCK_END.sub("\n", fragment)
    stripped = nh3.clean(blocky, tags=set(), clean_content_tags={"script", "style"})
    return "\n".join(" ".join(line.split()) for line in html.unescape(stripped).splitlines()).strip()


def plain_summary(item: DigestItem) -> str:
    if item.summary_type == "text/html":
        return html_to_text(item.summary)
    return latex_to_text(item.summary)


def _linkify(text: str) -> Markup:
    out: list[str] = []
    last = 0
    for match in _URL_RE.finditer(text):
        url = match.group(0).rstrip(".,;:!?")
        out.append(str(escape(text[last : match.start()])))
        out.append(f'<a href="{escape(url)}">{escape(url)}</a>')
        last = match.start() + len(url)
    out.append(str(escape(text[last:])))
    return Markup("".join(out))


def html_summary(item: DigestItem, *, remote_images: bool = False) -> Markup:
    if item.summary_type == "text/html":
        return Markup(sanitize_html(item.summary, remote_images=remote_images))
    paragraphs = [p for p in latex_to_text(item.summary).split("\n\n") if p.strip()]
    return Markup("".join(f"<p>{_linkify(p)}</p>" for p in paragraphs))


def primary_url(item: DigestItem | EntryView, search_url: str) -> str:
    """Where the title links: GitHub for repositories; for papers the arXiv or
    DOI page, else the first link the source gave or the summary names, else a search."""
    if isinstance(item, DigestItem) and is_web_url(item.url):
        return item.url
    if item.kind is EntryKind.REPO and item.links and is_web_url(item.links[0]):
        return item.links[0]
    if item.arxiv_id:
        return f"https://arxiv.org/abs/{quote(item.arxiv_id, safe='./')}"
    if item.doi:
        return f"https://doi.org/{quote(item.doi, safe='/:;()._-')}"
    for url in item.links:
        if is_web_url(url):
            return url
    return search_url.format(title=quote_plus(item.title))


def byline(item: DigestItem) -> str:
    if item.kind is EntryKind.REPO:
        extra = dict(item.extra)
        parts = [extra.get("owner", ", ".join(item.authors))]
        if extra.get("language"):
            parts.append(extra["language"])
        if extra.get("stars"):
            parts.append(f"{int(extra['stars']):,} stars")
    else:
        authors = list(item.authors[:MAX_AUTHORS])
        if len(item.authors) > MAX_AUTHORS:
            authors.append("et al.")
        parts = [", ".join(authors)] if authors else []
    if item.published:
        parts.append(item.published.isoformat())
    return " · ".join(p for p in parts if p)


def top_tags(items: tuple[DigestItem, ...], count: int = 3) -> list[str]:
    tally: Counter[str] = Counter()
    labels: dict[str, str] = {}
    for item in items:
        for tag in item.tags:
            tally[tag.casefold()] += 1
            labels.setdefault(tag.casefold(), tag)
    ranked = sorted(tally, key=lambda name: (-tally[name], name))
    return [labels[name] for name in ranked[:count]]


def subject_of(content: DigestContent) -> str:
    n = len(content.items)
    tags = top_tags(content.items)
    subject = f"{n} new {'entry' if n == 1 else 'entries'}"
    if tags:
        subject += ": " + ", ".join(tags)
    subject += f" ({content.local_date.isoformat()})"
    if content.resend_of is not None:
        subject = "[resent] " + subject
    return one_line(subject)


@lru_cache(maxsize=8192)
def _wrap(text: str, width: int = 78, indent: str = "", first: str | None = None) -> str:
    """Jinja filter: wrap each paragraph to *width*; URLs and long words are never broken."""
    first = indent if first is None else first
    paragraphs = [p for p in text.split("\n\n")] or [""]
    out = []
    for n, paragraph in enumerate(paragraphs):
        filled = textwrap.fill(
            " ".join(paragraph.split()),
            width=width,
            initial_indent=first if n == 0 else indent,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        out.append(filled)
    return "\n\n".join(out)


@dataclass(frozen=True, slots=True)
class Links:
    unsubscribe_url: str
    manage_url: str | None


def personal_context(email: str, links: Links) -> dict[str, object]:
    """The only context values that differ between two subscribers of one digest
    body (``bot.mail.splice`` relies on it: everything else is rendered once)."""
    return {"subscriber_email": email, "unsubscribe_url": links.unsubscribe_url, "manage_url": links.manage_url}


class Renderer:
    """Templates and stylesheet loaded once; ``render`` is called per digest."""

    def __init__(self, templates_dir: Path, *, search_url: str, remote_images: bool = False) -> None:
        self.search_url = search_url
        self.remote_images = remote_images
        self.env = Environment(
            loader=FileSystemLoader(str(templates_dir)),
            autoescape=select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        self.env.filters["wrap"] = _wrap
        self.html_template = self.env.get_template("digest.html.j2")
        self.text_template = self.env.get_template("digest.txt.j2")
        # The per-subscriber part of the text, rendered alone by the fast path (bot.mail.splice).
        footer_path = templates_dir / TEXT_FOOTER
        self.text_footer_template = self.env.get_template(TEXT_FOOTER) if footer_path.is_file() else None
        css_path = templates_dir / "digest.css"
        css = css_path.read_text(encoding="utf-8") if css_path.is_file() else ""
        self.inliner = css_inline.CSSInliner(
            keep_style_tags=False, load_remote_stylesheets=False, extra_css=css or None
        )

    def context(self, content: DigestContent, links: Links) -> dict[str, object]:
        items = []
        url_refs: list[tuple[int, str]] = []
        for n, item in enumerate(content.items, start=1):
            url = primary_url(item, self.search_url)
            url_refs.append((n, url))
            items.append(
                {
                    "title": one_line(item.title),
                    "url": url,
                    "ref": n,
                    "byline": byline(item),
                    "summary_text": plain_summary(item),
                    "summary_html": html_summary(item, remote_images=self.remote_images),
                    "tags": list(item.tags),
                    "why": item.why,
                }
            )
        count = len(content.items)
        return {
            "subject": subject_of(content),
            "heading": "Your research digest",
            "date_label": content.local_date.strftime("%A, %d %B %Y"),
            "count_label": f"{count} new {'entry' if count == 1 else 'entries'}",
            "subscriber_filter": content.subscriber.filter,
            "items": items,
            "pending": content.pending,
            "resend_of": content.resend_of,
            "links": url_refs,
            **personal_context(content.subscriber.email, links),
        }

    def render(self, content: DigestContent, links: Links) -> RenderedDigest:
        return self.render_context(self.context(content, links))

    def render_context(self, context: dict[str, object]) -> RenderedDigest:
        html_doc = self.inliner.inline(self.html_template.render(context))
        text = self.text_template.render(context)
        return RenderedDigest(subject=str(context["subject"]), text=text, html=html_doc)
