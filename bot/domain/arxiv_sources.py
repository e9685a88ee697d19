"""Domain: an arXiv category as a feed source, ``arxiv:cs.LG`` (several joined by ``+``:
``arxiv:cs.LG+cs.CL``), read into arXiv's own RSS feed of that day's announcements
(``https://rss.arxiv.org/rss/cs.LG+cs.CL``): new papers, cross-lists and replacements,
and nothing on the days arXiv announces nothing (weekends, holidays), so those days
bring no mail.  Pure; never I/O."""

from __future__ import annotations

import difflib
import re

PREFIX = "arxiv:"
DEFAULT_BASE = "https://rss.arxiv.org"
# arXiv's archives (https://arxiv.org/category_taxonomy); a category is one of them, or
# one of them and a subject class after a dot (cs.LG, astro-ph.CO, cond-mat.mes-hall).
ARCHIVES = frozenset(
    "astro-ph cond-mat cs econ eess gr-qc hep-ex hep-lat hep-ph hep-th math math-ph nlin nucl-ex nucl-th "
    "physics q-bio q-fin quant-ph stat".split()
)
_SUBJECT = re.compile(r"[A-Za-z]{2,}(-[a-z]{2,})?")


class ArxivSourceError(ValueError):
    """A source that is not an arXiv category list; ``str()`` says why, in one line."""


def is_arxiv_source(text: str) -> bool:
    return text.strip().lower().startswith(PREFIX)


def categories_of(text: str) -> tuple[str, ...]:
    """The categories ``arxiv:A+B`` names, each checked; ``ArxivSourceError`` otherwise."""
    named = text.strip()[len(PREFIX) :]
    found = tuple(part.strip() for part in named.split("+"))
    if not named or any(not part for part in found):
        raise ArxivSourceError(f"{text!r}: name arXiv categories after 'arxiv:', e.g. arxiv:cs.LG or arxiv:cs.LG+cs.CL")
    for category in found:
        archive, dot, subject = category.partition(".")
        if archive not in ARCHIVES:
            close = difflib.get_close_matches(archive.lower(), sorted(ARCHIVES), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ArxivSourceError(f"{text!r}: {archive!r} is not an arXiv archive{hint}")
        if dot and not _SUBJECT.fullmatch(subject):
            raise ArxivSourceError(f"{text!r}: {category!r} is not an arXiv category (such as cs.LG)")
    return found


def feed_url(text: str, base: str = DEFAULT_BASE) -> str:
    """arXiv's RSS feed of the categories *text* names."""
    return f"{base.rstrip('/')}/rss/{'+'.join(categories_of(text))}"
