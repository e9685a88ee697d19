"""Render stage: the words that frame a digest's entries: its subject, each entry's
byline and TL;DR line, the filter in words and the marks it puts on titles, the
contents and top picks, the preheader, the library's news.  Pure: never reads the
store, never renders a template.
"""

from __future__ import annotations

import html
import re
import textwrap
from collections import Counter
from functools import lru_cache

from bot.choose.filter_terms import And, Or, Phrase, Tag
from bot.choose.filters import FilterError, parse_filter, shown_filter
from bot.domain import DigestContent, DigestItem, EntryContent, EntryKind, UpdateLine
from bot.domain.text import one_line
from bot.llm.tldr import shown_tldr
from bot.mail.prose import marks_pattern, title_text
from bot.mail.why import library_paper
from bot.plan.cadence import is_weekly
from bot.taste import CLOSE_TO

MAX_AUTHORS = 6
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
PREHEADER_TITLES = 3
CONTENTS_FROM = 3  # entries; a shorter digest is its own contents


def byline(item: EntryContent) -> str:
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
    if item.published:  # "14 Jun 2026", never broken: at 375 px "2026-06-14" broke after "06-"
        parts.append(f"{item.published.day}\u00a0{_MONTHS[item.published.month - 1]}\u00a0{item.published.year}")
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


def period_words(content: DigestContent) -> str:
    """What follows "N new entries": this week, for a weekly subscriber's scheduled digest
    (it carries a week's entries), else nothing."""
    return " this week" if content.kind == "scheduled" and is_weekly(content.subscriber.cadence) else ""


def subject_of(content: DigestContent) -> str:
    n = len(content.items)
    tags = top_tags(content.items)
    subject = f"{n} new {'entry' if n == 1 else 'entries'}{period_words(content)}"
    if tags:
        subject += ": " + ", ".join(tags)
    subject += f" ({content.local_date.isoformat()})"
    if content.resend_of is not None:
        subject = "[resent] " + subject
    return one_line(subject)


_SPACES = re.compile(r"[^\S\u00a0]+")


def _words(paragraph: str, width: int) -> list[str]:
    """The words of *paragraph*: a no-break space holds its words together ("14 Jun 2026")
    while they fit half a line; longer, it is a space (a summary written with no-break
    spaces alone would otherwise be one word as long as the summary)."""
    words: list[str] = []
    for word in _SPACES.split(paragraph.strip()):
        words += word.split("\u00a0") if len(word) > width // 2 else [word]
    return [word for word in words if word]


@lru_cache(maxsize=8192)
def wrap_text(text: str, width: int = 78, indent: str = "", first: str | None = None) -> str:
    """Jinja filter: wrap each paragraph to *width*; URLs and long words are never broken."""
    first = indent if first is None else first
    paragraphs = [p for p in text.split("\n\n")] or [""]
    out = []
    for n, paragraph in enumerate(paragraphs):
        filled = textwrap.fill(
            " ".join(_words(paragraph, width)),
            width=width,
            initial_indent=first if n == 0 else indent,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        out.append(filled)
    return "\n\n".join(out)


Keywords = tuple[tuple[str, tuple[str, ...]], ...]  # (tag name, its rule's keywords)


@lru_cache(maxsize=4096)
def filter_marks(filter_text: str, keywords: Keywords = ()) -> re.Pattern[str] | None:
    """What to mark in a subscriber's entries: the phrases their filter asks for, and for
    each tag it asks for, the tag's name and its rule's keywords (nothing under a "not")."""
    try:
        expr = parse_filter(filter_text)
    except FilterError:
        return None
    by_tag = dict(keywords)
    wanted: list[str] = []
    for atom in positive_atoms(expr):
        wanted += [atom.text] if isinstance(atom, Phrase) else [atom.name, *by_tag.get(atom.name, ())]
    return marks_pattern(tuple(w for w in wanted if w.strip()))


def filter_in_words(text: str) -> str:
    """The reader's filter as their digest shows it: "everything" for ``*``."""
    shown = shown_filter(text)
    return "everything" if shown == "*" else shown


def positive_atoms(expr: object) -> list[Tag | Phrase]:
    if isinstance(expr, (Tag, Phrase)):
        return [expr]
    if isinstance(expr, (And, Or)):
        return [a for item in expr.items for a in positive_atoms(item)]
    return []  # a "not", or everything


# The first atom of a "why" line: a quoted phrase or a tag name, before its colon.
_FIRST_ATOM = re.compile(r'\A("(?:[^"\\]|\\.)*"|[^:;"]+):')


def contents_groups(items: list[dict[str, object]]) -> list[tuple[str, list[dict[str, object]]]]:
    """The entries grouped by the reader's interest each is shown under, when their
    filter names several (``bot.plan.sections``), else by the filter atom that brought
    each (the first of its "why"), groups in the order of their best entry; one unnamed
    group when all share one.  A model's "close to" note is not a filter atom: it names
    no group."""
    groups: dict[str, list[dict[str, object]]] = {}
    if any(item["section"] for item in items):
        for item in items:
            groups.setdefault(str(item["section"]), []).append(item)
        return list(groups.items())
    for item in items:
        match = _FIRST_ATOM.match(str(item["pinned_why"]))
        atom = match.group(1).strip() if match else ""
        groups.setdefault("" if atom == CLOSE_TO else atom, []).append(item)
    return list(groups.items()) if len(groups) > 1 else [("", items)]


def top_picks(content: DigestContent, count: int) -> list[int]:
    """The refs of the (at most) *count* entries the reader's model scores highest among
    those it likes (above their threshold) and is sure of (close to a paper of their
    library, which its why line names), best first, when their model ranked this digest
    and it holds more entries than that (else none)."""
    if count <= 0 or len(content.items) <= count:
        return []
    threshold = content.subscriber.taste_threshold
    sure = ((item.taste, ref) for ref, item in enumerate(content.items, start=1) if library_paper(item.why))
    liked = [(taste, ref) for taste, ref in sure if taste is not None and taste > threshold]
    return [ref for _, ref in sorted(liked, key=lambda pair: (-pair[0], pair[1]))[:count]]


PICKS, THE_REST = "Top picks for you", "Also in this digest"


def leading(items: list[dict[str, object]], picks: list[int]) -> dict[str, object]:
    """The contents, and the top picks above them.  When the picks are the digest's
    first entries anyway (a reader whose model alone orders it), the contents say so
    in two groups instead of listing them twice."""
    contents = contents_groups(items) if len(items) >= CONTENTS_FROM or any(i["section"] for i in items) else []
    if picks and picks == list(range(1, len(picks) + 1)) and len(contents) == 1:
        return {"contents": [(PICKS, items[: len(picks)]), (THE_REST, items[len(picks) :])], "picks": []}
    return {"contents": contents, "picks": [items[ref - 1] for ref in picks]}


def preheader(items: list[dict[str, object]]) -> str:
    """The line a mailbox shows under the subject: the top titles."""
    line = " · ".join(str(item["title"]) for item in items[:PREHEADER_TITLES])
    return line if len(line) <= 150 else line[:149].rsplit(" ", 1)[0] + " …"


def update_shown(update: UpdateLine) -> dict[str, str]:
    return {"title": title_text(update.title), "note": update.note, "url": update.url}


def tldr_shown(item: DigestItem) -> dict[str, str]:
    """A model's TL;DR as the templates show it, marked as the model's: every column
    judged again as it is shown (a restored row is outside bytes), else nothing."""
    shown = shown_tldr(item.tldr)
    if shown is None:
        return {"tldr": ""}
    return {"tldr": shown.text, "tldr_model": shown.model, "tldr_language": shown.language}


def tldr_html(item: DigestItem) -> str:
    """The TL;DR as one HTML paragraph outside the templates (the personal feed), or ""."""
    shown = tldr_shown(item)
    if not shown["tldr"]:
        return ""
    by, language, text = (html.escape(shown[name]) for name in ("tldr_model", "tldr_language", "tldr"))
    named = f" ({by})" if by else ""
    return f'<p class="tldr"><em>TL;DR by a language model{named}:</em> <span lang="{language}">{text}</span></p>'
