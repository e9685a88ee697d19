"""Identity: what makes two source entries "the same entry" (see DUMPS.md).

Pure functions only; must never touch the store.  The order of preference is
arXiv id, DOI, repository ``owner/name`` (case-insensitive), normalized title.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from bot.domain import EntryKind, ParsedEntry

# New-style ids (0704.0001 onwards, 4 or 5 digits after the dot) and old-style
# "archive/YYMMNNN" ids; the version suffix is captured separately so it can be dropped.
_ARXIV_NEW = r"\d{4}\.\d{4,5}"
_ARXIV_OLD = r"[a-z][a-z\-]*(?:\.[A-Z]{2})?/\d{7}"
_ARXIV_RE = re.compile(
    rf"(?:arxiv[:/]|arxiv\.org/(?:abs|pdf|html)/|oai:arxiv\.org:)\s*(?P<id>{_ARXIV_NEW}|{_ARXIV_OLD})(?:v\d+)?",
    re.IGNORECASE,
)
_BARE_ARXIV_RE = re.compile(rf"^(?P<id>{_ARXIV_NEW})(?:v\d+)?$")
_DOI_RE = re.compile(r"\b(10\.\d{4,9}/[^\s\"<>\x00-\x1f\x7f\ud800-\udfff\ufffe\uffff]+)", re.IGNORECASE)
# An entry known by its DOI is keyed "doi:" + the DOI, in a column of 200 characters;
# real DOIs are far shorter.
MAX_DOI = 196
# \W is "not str.isalnum() and not _", i.e. not a Unicode letter or number.
_NOT_ALNUM = re.compile(r"[\W_]+")
_REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


def normalize_title(title: str) -> str:
    """NFKC, casefold, and every run of non-alphanumerics (punctuation,
    whitespace, underscores) folded to one space."""
    return _NOT_ALNUM.sub(" ", unicodedata.normalize("NFKC", title).casefold()).strip()


def arxiv_id_in(text: str) -> str | None:
    """The first arXiv id (without version) named in *text*, if any."""
    match = _ARXIV_RE.search(text) or _BARE_ARXIV_RE.match(text.strip())
    return match.group("id") if match else None


def doi_in(text: str) -> str | None:
    """The first DOI named in *text* (lower-cased); None when there is none, or it is
    too long to be one (``MAX_DOI``)."""
    match = _DOI_RE.search(text)
    doi = match.group(1).rstrip(".,;)").lower() if match else None
    return doi if doi and len(doi) <= MAX_DOI else None


def is_repo_name(text: str) -> bool:
    return bool(_REPO_RE.match(text))


def repo_key(owner_name: str) -> str:
    return f"repo:{owner_name.lower()}"


def title_hash(title_norm: str) -> int:
    """A signed 64-bit hash of a normalized title: what the store indexes for
    title look-ups (8 bytes per index entry instead of the whole title)."""
    return int.from_bytes(hashlib.sha256(title_norm.encode("utf-8")).digest()[:8], "big", signed=True)


def title_key(title_norm: str) -> str:
    return key_for_title_hash(title_hash(title_norm))


def key_for_title_hash(hashed: int) -> str:
    """The key of a paper known only by its title, from that title's hash."""
    return f"paper:{hashed & 0xFFFFFFFFFFFFFFFF:016x}"


def entry_key(entry: ParsedEntry, title_norm: str | None = None) -> str:
    """The stable key a *new* entry is stored under.  It never changes later,
    even when an arXiv id is learned for an entry first keyed by title."""
    content = entry.content
    if content.kind is EntryKind.REPO and entry.repo:
        return repo_key(entry.repo)
    if content.arxiv_id:
        return f"arxiv:{content.arxiv_id}"
    if content.doi:
        return f"doi:{content.doi}"
    return title_key(title_norm if title_norm is not None else normalize_title(content.title))
