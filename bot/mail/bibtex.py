"""Render stage: BibTeX for a digest's entries (the web version's export).

Built from what the store knows (title, authors, year, arXiv id, DOI, link); every
value goes through pylatexenc's encoder, so %, & and accents in a title cannot break
the file, and every braced value is balanced by BibTeX's own rule, which counts each
brace, escaped or not (``\\}`` closes a field for BibTeX): a brace in a title is written
``\textbraceright{}``.  ``url`` is the paper's page or nothing, never a search.  Pure:
never reads the store.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from pylatexenc.latexencode import unicode_to_latex

from bot.domain import DigestItem, EntryKind
from bot.domain.links import primary_url
from bot.domain.text import CONTROL_CHARACTERS
from bot.mail.prose import title_text

_KEY_WORD = re.compile(r"[A-Za-z0-9]+")
_UNSAFE_IN_IDENTIFIERS = str.maketrans("", "", "{}\\")


def _ascii_words(text: str) -> list[str]:
    flat = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _KEY_WORD.findall(flat)


def _key(item: DigestItem) -> str:
    """``lamport2026scheduling``: the first author's last name, the year, the title's first word."""
    content = item.content
    first_author = (content.authors[0] if content.authors else (content.extra_value("owner") or "")).split()
    surname = (_ascii_words(first_author[-1]) or ["anon"])[0] if first_author else "anon"
    year = str(content.published.year) if content.published else ""
    word = next((w for w in _ascii_words(title_text(content.title)) if len(w) > 3), "entry")
    return f"{surname}{year}{word}".lower()


def bibtex_entry(item: DigestItem, search_url: str, key: str | None = None) -> str:
    """One ``@misc``/``@article``/``@software`` entry for *item*."""
    content = item.content
    fields: list[tuple[str, str]] = [("title", title_text(content.title))]
    if content.authors:
        fields.append(("author", " and ".join(content.authors)))
    if content.published:
        fields.append(("year", str(content.published.year)))
    kind = "misc"
    if content.kind is EntryKind.REPO:
        kind = "software"
    elif content.doi:
        kind = "article"
        fields.append(("doi", content.doi))
    if content.arxiv_id:
        fields += [("eprint", content.arxiv_id), ("archiveprefix", "arXiv")]
    url = paper_url(item, search_url)
    if url:
        fields.append(("url", url))
    lines = [f"@{kind}{{{key or _key(item)},"]
    for name, raw in fields:
        value = " ".join(CONTROL_CHARACTERS.sub(" ", raw).split())
        if name in ("url", "doi", "eprint"):  # kept as they are, less what would break the file
            shown = value.translate(_UNSAFE_IN_IDENTIFIERS)
        else:
            shown = braced_text(value)
        lines.append(f"  {name} = {{{shown}}},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def paper_url(item: DigestItem, search_url: str) -> str:
    """The paper's own page (arXiv, DOI, the page its source gave); "" when all we have
    is a search for its title."""
    url = primary_url(item.content, search_url, item.url)
    search = search_url.split("{", 1)[0]
    return "" if search and url.startswith(search) else url


def braced_text(value: str) -> str:
    """*value* as LaTeX for a braced BibTeX field: balanced as BibTeX counts braces."""
    shown = str(unicode_to_latex(value, unknown_char_policy="keep"))
    shown = shown.replace("\\{", "\\textbraceleft{}").replace("\\}", "\\textbraceright{}")
    if balanced(shown):
        return shown
    return str(unicode_to_latex(value.replace("{", "").replace("}", ""), unknown_char_policy="keep"))  # a safety net


def balanced(text: str) -> bool:
    """BibTeX's rule: every brace counts; the depth never drops below zero and ends at it."""
    depth = 0
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def bibtex_of(items: Sequence[DigestItem], search_url: str) -> str:
    """Entries for *items*, a repeated key numbered (``lamport2026scheduling-2``)."""
    seen: dict[str, int] = {}
    out = []
    for item in items:
        key = _key(item)
        count = seen.get(key, 0)
        seen[key] = count + 1
        out.append(bibtex_entry(item, search_url, key if count == 0 else f"{key}-{count + 1}"))
    return "\n".join(out)
