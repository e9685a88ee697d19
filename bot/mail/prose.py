"""Render stage: the words of an entry as a digest shows them.

LaTeX made readable (pylatexenc) wherever it occurs: titles, plain summaries
and the text between the tags of HTML summaries; feed HTML sanitized (nh3);
long summaries cut at a sentence; the filter's words marked.  Pure and cached:
a day's entries are rendered for many subscribers.  Never reads the store,
never decides which entries a digest holds.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace
from functools import lru_cache

import nh3
from markupsafe import Markup, escape
from pylatexenc.latex2text import LatexNodes2Text

from bot.choose.matching import phrase_pattern
from bot.domain import EntryContent
from bot.domain.text import PROSE_URL

_LATEX = LatexNodes2Text(math_mode="text", strict_latex_spaces=False)
# Characters LaTeX treats specially that plain prose uses literally.
_BARE_SPECIALS = re.compile(r"(?<!\\)([%&#])")
_PLACEHOLDER = "zzlatexurl{}zz"
# A control word and the spaces after it (LaTeX itself swallows those spaces).
_CONTROL_WORD_SPACE = re.compile(r"\\([A-Za-z]+)[ \t]+(?=[^\W\d_])")
# A tag that ends a line of text.  Its attributes stop at the next "<" as well as at
# ">": with [^>]* an unclosed "<br<br<br..." rescanned the rest of the summary per tag.
_BLOCK_END = re.compile(r"<\s*(?:br|/p|/li|/blockquote)\b[^<>]*>", re.IGNORECASE)
# A tag of sanitized HTML, quoted attribute values (which may hold ">") included.
_TAG = re.compile(r"""(<(?:[^<>"']|"[^"]*"|'[^']*')*>)""")
# Where a sentence ends: . ! or ? then space and a capital, a digit or an opening mark.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]?\s+(?=[A-Z0-9(\[\"'])")

# A summary cut near N characters is read from its first READ_AT_MOST × N only.
READ_AT_MOST = 10

ALLOWED_TAGS = {"p", "br", "b", "strong", "i", "em", "a", "ul", "ol", "li", "code", "pre", "sub", "sup", "blockquote"}
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}}
ALLOWED_SCHEMES = {"http", "https", "mailto"}


@lru_cache(maxsize=1024)
def _is_letter_macro(name: str) -> bool:
    """Whether ``\\name`` prints one letter (``\\mu`` -> "μ"), which then joins the word
    after it as in LaTeX (``$150~\\mu s$`` -> "150 μs"); ``\\log n`` keeps its space."""
    try:
        printed = _LATEX.latex_to_text("\\" + name)
    except Exception:  # pylatexenc is lenient, but never let a macro name break a digest
        return False
    return len(printed) == 1 and printed.isalpha()


def _join_letter_macros(match: re.Match[str]) -> str:
    return f"\\{match.group(1)}{{}}" if _is_letter_macro(match.group(1)) else match.group(0)


@lru_cache(maxsize=8192)
def latex_to_text(text: str) -> str:
    """Readable text from prose that may carry LaTeX ("$1.45\\times$" -> "1.45×").

    Only text with a backslash or a dollar sign goes through pylatexenc; URLs
    are protected from it and bare %, & and # stay literal (in a dump they are
    prose: "67.2% and ..."), so nothing is ever lost."""
    if "\\" not in text and "$" not in text:
        return text
    urls: list[str] = []

    def stash(match: re.Match[str]) -> str:
        urls.append(match.group(0))
        return _PLACEHOLDER.format(len(urls) - 1)

    guarded = _BARE_SPECIALS.sub(r"\\\1", PROSE_URL.sub(stash, text))
    guarded = _CONTROL_WORD_SPACE.sub(_join_letter_macros, guarded)
    try:
        converted = _LATEX.latex_to_text(guarded)
    except Exception:  # pylatexenc is lenient, but a summary must never break a digest
        return text
    converted = converted.replace("\u00a0", " ")
    for index, url in enumerate(urls):
        converted = converted.replace(_PLACEHOLDER.format(index), url)
    return str(converted)


def title_text(title: str) -> str:
    """A title as both parts and the contents list show it: LaTeX made readable, one line."""
    return " ".join(latex_to_text(title).split())


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


def _between_tags(fragment: str, change: re.Pattern[str] | None) -> str:
    """Sanitized HTML with LaTeX made readable, and *change*'s matches marked, in the
    text between its tags only: never inside a tag or an attribute."""
    pieces = _TAG.split(fragment)
    for index in range(0, len(pieces), 2):  # even pieces are text, odd ones tags
        text = pieces[index]
        if "$" in text or "\\" in text:
            text = str(escape(latex_to_text(html.unescape(text))))
        if change is not None:
            text = str(_marked(html.unescape(text), change))
        pieces[index] = text
    return "".join(pieces)


def marks_pattern(phrases: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern finding any of *phrases* as the filter does (case-insensitive, on word
    boundaries, "kv cache" finding "KV-cache"); None for none."""
    if not phrases:
        return None
    return _alternation(tuple(sorted(set(phrases), key=lambda p: (-len(p), p))))


@lru_cache(maxsize=1024)
def _alternation(phrases: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{phrase_pattern(p).pattern})" for p in phrases), re.IGNORECASE)


def _marked(text: str, marks: re.Pattern[str] | None) -> Markup:
    """*text* escaped, each match of *marks* in ``<mark>``."""
    if marks is None:
        return escape(text)
    out: list[str] = []
    last = 0
    for match in marks.finditer(text):
        if match.end() == match.start():
            continue
        out.append(str(escape(text[last : match.start()])))
        out.append(f"<mark>{escape(match.group(0))}</mark>")
        last = match.end()
    out.append(str(escape(text[last:])))
    return Markup("".join(out))


def _linkified(text: str, marks: re.Pattern[str] | None) -> Markup:
    """*text* escaped, its URLs made links, the rest marked."""
    out: list[str] = []
    last = 0
    for match in PROSE_URL.finditer(text):
        url = match.group(0).rstrip(".,;:!?")
        out.append(str(_marked(text[last : match.start()], marks)))
        out.append(f'<a href="{escape(url)}">{escape(url)}</a>')
        last = match.start() + len(url)
    out.append(str(_marked(text[last:], marks)))
    return Markup("".join(out))


def cut_at_sentence(text: str, limit: int) -> str | None:
    """*text* shortened near *limit* characters at the end of a sentence (or, when its
    first sentence alone runs far past the limit, at a space, with "…"); None when it
    is short enough to show whole (up to a quarter over the limit)."""
    if limit <= 0 or len(text) <= limit + limit // 4:
        return None
    best = None
    for match in _SENTENCE_END.finditer(text, 0, limit + limit // 4):
        end = match.start() + len(match.group(0).rstrip())
        if end >= limit // 2:
            best = end
            if end >= limit:
                break
    if best is not None:
        return text[:best].rstrip()
    space = text.rfind(" ", 0, limit)
    return text[: space if space > limit // 2 else limit].rstrip(" ,;:") + " …"


def plain_summary(item: EntryContent) -> str:
    if item.summary_type == "text/html":
        # Sanitized first: the tag splitter relies on well-formed HTML.
        return html_to_text(_between_tags(sanitize_html(item.summary), None))
    return latex_to_text(item.summary)


@dataclass(frozen=True, slots=True)
class Summary:
    """One entry's summary as both parts show it."""

    text: str
    html: Markup
    cut: bool  # shortened: the whole is behind the entry's "more" link


@lru_cache(maxsize=8192)
def summary_of(
    item: EntryContent, limit: int, marks: re.Pattern[str] | None = None, *, remote_images: bool = False
) -> Summary:
    """*item*'s summary, cut near *limit* characters (0: whole) at a sentence, with the
    words of *marks* marked in the HTML part."""
    window = limit * READ_AT_MOST
    short: str | None
    if limit > 0 and len(item.summary) > window:
        # Only the start can be shown: LaTeX costs microseconds a character, and a
        # feed may carry megabytes of it.
        text = plain_summary(replace(item, summary=item.summary[:window]))
        short = cut_at_sentence(text, limit) or text + " …"
    else:
        text = plain_summary(item)
        short = cut_at_sentence(text, limit)
    if short is None and item.summary_type == "text/html":
        kept = sanitize_html(item.summary, remote_images=remote_images)
        return Summary(text, Markup(_between_tags(kept, marks)), False)
    # Text from HTML has a line per block; a plain summary, a blank line per paragraph.
    breaks = "\n" if item.summary_type == "text/html" else "\n\n"
    shown = text if short is None else short
    paragraphs = [p for p in shown.split(breaks) if p.strip()]
    return Summary(shown, Markup("".join(f"<p>{_linkified(p, marks)}</p>" for p in paragraphs)), short is not None)


def title_html(title: str, marks: re.Pattern[str] | None) -> Markup:
    return _marked(title_text(title), marks)
