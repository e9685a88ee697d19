"""Render stage: a ``DigestContent`` in, subject + plain text + HTML out.

Jinja2 templates from ``paths.templates_dir`` (autoescaped HTML, StrictUndefined),
one stylesheet inlined with css-inline (its ``@media`` rules, dark mode among
them, kept in a ``<style>``), the words of each entry from ``prose``.  A digest
whose HTML part would pass ``HTML_BUDGET`` shows its last entries in a compact
form instead, so Gmail never clips it.  Pure: never reads the store, never sends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote_plus

import css_inline
from jinja2 import FileSystemLoader

from bot.domain import DigestContent, DigestItem, EntryKind, RenderedDigest
from bot.domain.links import primary_url, side_links
from bot.domain.routes import MANAGE, RATING, UNSUBSCRIBE, WEB_VERSION, WEB_VERSION_PART, WEB_VERSIONS, ZOTERO_SAVE
from bot.mail.framing import (
    Keywords,
    byline,
    filter_in_words,
    filter_marks,
    leading,
    period_words,
    preheader,
    subject_of,
    tldr_shown,
    top_picks,
    update_shown,
    wrap_text,
)
from bot.mail.prose import summary_of, title_html, title_text
from bot.mail.templates import digest_environment
from bot.mail.why import EVERY_PAPER, reader_why

TEXT_FOOTER = "_footer.txt.j2"
# Gmail clips an HTML part over 102 KB, hiding the rest (the unsubscribe link with it).
HTML_BUDGET = 90_000
# The most a subscriber's own address adds to a body measured without it (and with
# links as long as theirs).
PERSONAL_ALLOWANCE = 1_500
# A token as long as any subscriber's (``bot.tokens``: a ten-digit id, a dot, 24 characters),
# so that the budget is measured with links as long as the real ones.
_LONGEST_TOKEN = "9" * 10 + "." + "x" * 24


@dataclass(frozen=True, slots=True)
class Links:
    unsubscribe_url: str
    manage_url: str | None
    web_url: str | None = None  # the subscriber's web versions: <web_url>/<date>, .bib exports


def _savings(whole: bytes, compact: bytes, refs: list[object]) -> list[int]:
    """Bytes each entry saves when shown compact: its part of the all-full page less its
    part of the all-compact one, the parts cut at each entry's ``id``; the last entry's
    saving is what the pages differ by beyond the others'."""

    def starts(page: bytes) -> list[int]:
        return [page.rfind(b"<", 0, page.find(f' id="e{ref}"'.encode())) for ref in refs]

    full_at, compact_at = starts(whole), starts(compact)
    saved = [(full_at[n + 1] - full_at[n]) - (compact_at[n + 1] - compact_at[n]) for n in range(len(refs) - 1)]
    return [*saved, len(whole) - len(compact) - sum(saved)]


def web_links(public_url: str, token: str) -> Links:
    """The https links of a subscriber whose endpoint is served at *public_url*."""
    return Links(
        UNSUBSCRIBE.url(public_url, token=token),
        MANAGE.url(public_url, token=token),
        WEB_VERSIONS.url(public_url, token=token),
    )


def entry_paths(day: str, ref: int) -> dict[str, str]:
    """Where an entry's links go under its reader's web versions (``Links.web_url``)."""
    return {
        "bib_path": WEB_VERSION_PART.below(WEB_VERSIONS, day=day, ref=f"{ref}.bib"),
        "more_path": RATING.below(WEB_VERSIONS, day=day, ref=ref, verdict="more"),
        "less_path": RATING.below(WEB_VERSIONS, day=day, ref=ref, verdict="less"),
        "save_path": ZOTERO_SAVE.below(WEB_VERSIONS, day=day, ref=ref),
    }


def personal_context(email: str, links: Links) -> dict[str, object]:
    """The only context values that differ between two subscribers of one digest
    body (``bot.mail.splice`` relies on it: everything else is rendered once)."""
    return {
        "subscriber_email": email,
        "unsubscribe_url": links.unsubscribe_url,
        "manage_url": links.manage_url,
        "web_url": links.web_url,
    }


class Renderer:
    """Templates and stylesheet loaded once; ``render`` is called per digest."""

    SHOWN_ITEMS = 4096  # entries kept as shown (a day has a few hundred)

    def __init__(
        self,
        templates_dir: Path,
        *,
        search_url: str,
        remote_images: bool = False,
        summary_chars: int = 400,
        keywords: Keywords = (),
        fit: bool = True,
        public_url: str = "",
        top_picks: int = 0,
    ) -> None:
        self.search_url = search_url
        # Each entry as shown, by entry and marks: a day's bodies share most entries.
        self._shown: dict[tuple[DigestItem, re.Pattern[str] | None], dict[str, object]] = {}
        self.top_picks = top_picks  # "Top picks for you" above the contents, for a reader with a model
        # Whose links the budget is measured with: the longest a subscriber of *public_url* has.
        self.measured_links = web_links(public_url, _LONGEST_TOKEN) if public_url else Links("", None)
        self.fit = fit  # keep the HTML part within HTML_BUDGET (off for the web version)
        self.keywords = keywords  # marked where a filter names their tag
        self.remote_images = remote_images
        self.summary_chars = summary_chars
        self.env = digest_environment(FileSystemLoader(str(templates_dir)))
        self.env.filters["wrap"] = wrap_text
        self.html_template = self.env.get_template("digest.html.j2")
        self.text_template = self.env.get_template("digest.txt.j2")
        # The per-subscriber part of the text, rendered alone by the fast path (bot.mail.splice).
        footer_path = templates_dir / TEXT_FOOTER
        self.text_footer_template = self.env.get_template(TEXT_FOOTER) if footer_path.is_file() else None
        css_path = templates_dir / "digest.css"
        css = css_path.read_text(encoding="utf-8") if css_path.is_file() else ""
        self.inliner = css_inline.CSSInliner(
            keep_style_tags=False,
            keep_at_rules=True,
            minify_css=True,
            load_remote_stylesheets=False,
            extra_css=css or None,
        )

    def context(self, content: DigestContent, links: Links) -> dict[str, object]:
        marks = filter_marks(content.subscriber.filter, self.keywords)
        day = content.local_date.isoformat()
        items = [self._item(n, item, marks, day) for n, item in enumerate(content.items, start=1)]
        count = len(content.items)
        context: dict[str, object] = {
            "subject": subject_of(content),
            "heading": "Your weekly research digest" if period_words(content) else "Your research digest",
            "preheader": preheader(items),
            "date_label": content.local_date.strftime("%A, %d %B %Y"),
            "date_iso": day,
            "page_path": WEB_VERSION.below(WEB_VERSIONS, day=day),
            "page_bib_path": WEB_VERSION.below(WEB_VERSIONS, day=f"{day}.bib"),
            "web_page": not self.fit,
            "count_label": f"{count} new {'entry' if count == 1 else 'entries'}{period_words(content)}",
            "subscriber_filter": filter_in_words(content.subscriber.filter),
            "items": items,
            **leading(items, top_picks(content, self.top_picks)),
            "updates": [update_shown(u) for u in content.updates if not u.library],
            "library_news": [update_shown(u) for u in content.updates if u.library],
            "pending": content.pending,
            "resend_of": content.resend_of,
            "zotero_save": content.zotero_save,
            "zotero_broken": content.zotero_broken,
            "links": [(item["ref"], item["url"]) for item in items],
            **personal_context(content.subscriber.email, links),
        }
        self._fit(context, items)
        return context

    def _item(self, ref: int, item: DigestItem, marks: re.Pattern[str] | None, day: str) -> dict[str, object]:
        shown = self._shown.get((item, marks))
        if shown is None:
            if len(self._shown) >= self.SHOWN_ITEMS:
                self._shown.clear()
            shown = self._shown[item, marks] = self._shown_item(item, marks)
        summary_text, cut = shown["summary_text"], shown["cut"]
        more = cut and not shown["searched"]
        text = f"{summary_text} (more: [{ref}])" if more else summary_text
        return {**shown, "ref": ref, "summary_text": text, **entry_paths(day, ref)}

    def _shown_item(self, item: DigestItem, marks: re.Pattern[str] | None) -> dict[str, object]:
        """What the templates show of *item*, but its number in the digest."""
        content = item.content
        url = primary_url(content, self.search_url, item.url)
        summary = summary_of(content, self.summary_chars, marks, remote_images=self.remote_images)
        description = (content.extra_value("description") or "") if content.kind is EntryKind.REPO else ""
        return {
            "content": content,  # what the entry says of itself, for a template to show a field as it is
            "title": title_text(content.title),
            "title_html": title_html(content.title, marks),
            "url": url,
            # A search for the title (no page of its own) is no place to read the rest.
            "searched": url == self.search_url.format(title=quote_plus(content.title)),
            "byline": byline(content),
            "side_links": side_links(content),
            "description": title_text(description),
            "description_html": title_html(description, marks),
            "summary_text": summary.text,
            "summary_html": summary.html,
            "cut": summary.cut,
            "tags": list(item.tags),
            # "You asked for every paper" under each entry said what the header says once.
            "why": "" if (why := reader_why(item.why, item.section, summary_cut=summary.cut)) == EVERY_PAPER else why,
            "pinned_why": item.why,  # as the planner pinned it: what the contents are grouped by
            "section": item.section,
            "compact": False,
            **tldr_shown(item),
        }

    def _fit(self, context: dict[str, object], items: list[dict[str, object]]) -> None:
        """Show the last entries compact (title and byline) while the HTML part would pass
        the budget; as few as possible.  Measured without the subscriber's address and with
        the longest links any subscriber has, so every subscriber of one body gets the
        same layout.

        Each entry's part of the page is the same whoever else is full or compact, so two
        renders (all full, all compact) say what making each compact saves, and a third
        checks the count they give; a count that does not fit falls back to a binary
        search below it (it took six renders a body, each with its CSS inlined)."""
        budget = HTML_BUDGET - PERSONAL_ALLOWANCE
        if not self.fit or not items:
            return
        measured = {**context, **personal_context("", self.measured_links)}

        def page(full: int) -> bytes:
            for index, item in enumerate(items):
                item["compact"] = index >= full
            return self.inliner.inline(self.html_template.render(measured)).encode("utf-8")

        whole = page(len(items))
        if len(whole) <= budget:
            return
        compact = page(0)
        saved = _savings(whole, compact, [item["ref"] for item in items])
        full, size = len(items), len(whole)
        while full > 0 and size > budget:
            full -= 1
            size -= saved[full]
        high = full
        if full and len(page(full)) > budget:  # the parts were not additive after all
            low, high = 0, full - 1
            while low < high:  # the most entries shown in full that still fit
                middle = (low + high + 1) // 2
                if len(page(middle)) <= budget:
                    low = middle
                else:
                    high = middle - 1
        for index, item in enumerate(items):
            item["compact"] = index >= high

    def render(self, content: DigestContent, links: Links) -> RenderedDigest:
        return self.render_context(self.context(content, links))

    def render_context(self, context: dict[str, object]) -> RenderedDigest:
        html_doc = self.inliner.inline(self.html_template.render(context))
        if not html_doc.endswith("\n"):  # as the part decodes: the email package ends a body with one
            html_doc += "\n"
        text = self.text_template.render(context)
        return RenderedDigest(subject=str(context["subject"]), text=text, html=html_doc)
