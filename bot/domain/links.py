"""Where an entry's links go: the title's target and the small links beside it.

Pure rules shared by the planner (which pins each entry's title link when it
plans a digest) and the render stage.  Never reads the store, never renders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from bot.domain import EntryContent, EntryKind
from bot.domain.text import is_web_url, urls_in

# Links a reader of a paper wants by name: its code, its model or data.
_CODE_HOSTS = re.compile(r"^https?://(?:www\.)?(?:github\.com|gitlab\.com|codeberg\.org)/[^/\s]+/[^/\s]+", re.I)
_MODEL_HOSTS = re.compile(r"^https?://(?:www\.)?huggingface\.co/", re.I)


def _points_elsewhere(url: str, item: EntryContent) -> bool:
    """Whether *url* is something a paper points to (its code, a model, a URL its plain
    summary names) rather than the paper's own page.  An HTML summary's links stay
    candidates: feeds link their own page from it ("Read more")."""
    if _CODE_HOSTS.match(url) or _MODEL_HOSTS.match(url):
        return True
    return item.summary_type != "text/html" and url in item.summary


def primary_url(item: EntryContent, search_url: str, pinned: str = "") -> str:
    """Where the title links: *pinned* (what the planner chose for a digest) when it is
    a web address; GitHub for repositories; for papers the arXiv or DOI page, else the
    page the source gave for it, else a search for its title."""
    if is_web_url(pinned):
        return pinned
    if item.kind is EntryKind.REPO and item.links and is_web_url(item.links[0]):
        return item.links[0]
    if item.arxiv_id:
        return arxiv_page(item.arxiv_id)
    if item.doi:
        return f"https://doi.org/{quote(item.doi, safe='/:;()._-')}"
    for url in item.links:
        if is_web_url(url) and not _points_elsewhere(url, item):
            return url
    return search_url.format(title=quote_plus(item.title))


def arxiv_page(arxiv_id: str) -> str:
    return f"https://arxiv.org/abs/{quote(arxiv_id, safe='./')}"


def side_links(item: EntryContent) -> tuple[tuple[str, str], ...]:
    """The small labelled links after a paper's byline: its PDF on arXiv, and the first
    code and model URLs its summary names (from the summary the digest carries, so a
    resend shows what the original showed; repositories have their title link only)."""
    if item.kind is EntryKind.REPO:
        return ()
    found: list[tuple[str, str]] = []
    if item.arxiv_id:
        found.append(("PDF", f"https://arxiv.org/pdf/{quote(item.arxiv_id, safe='./')}"))
    for label, pattern in (("Code", _CODE_HOSTS), ("Model", _MODEL_HOSTS)):
        url = next((u for u in urls_in(item.summary) if is_web_url(u) and pattern.match(u)), None)
        if url is not None:
            found.append((label, url))
    return tuple(found)


def code_links(links: Iterable[str]) -> tuple[str, ...]:
    """The code and model links among *links*, in order: what news of a paper's code is
    made of (``bot.ingest.resolve`` keeps every one an entry was ever given)."""
    return tuple(url for url in links if _CODE_HOSTS.match(url) or _MODEL_HOSTS.match(url))


def is_model_link(url: str) -> bool:
    return bool(_MODEL_HOSTS.match(url))
