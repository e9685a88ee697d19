"""Zotero stage, the API's shapes: what the Zotero Web API (v3) answers, read; what digestbot
asks of it, written.  Pure: bytes and headers in, small values out; never sends, never
reads the store.

Every answer is outside bytes.  Each reader here takes the body the HTTP layer already
bounded, reads it once (``json`` is linear; a document nested too deep or a number too
long is refused, not raised), checks each value's type and shape, and says what is wrong
in one line (``ZoteroAnswerError``): a wrong answer is that pass's failure, never the
process's.  Titles and abstracts become text as a library file's do
(``bot.taste.library.paper_of``): one line, no control or bidi characters, cut to length;
a page shows them escaped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from bot.domain import EntryContent, EntryKind, LibraryPaper
from bot.domain.text import one_line, storable
from bot.taste.library import paper_of, plain

# An object's key: eight of Zotero's 32 letters and digits.
ITEM_KEY = re.compile(r"[23456789ABCDEFGHIJKLMNPQRSTUVWXYZ]{8}")
LIBRARY = re.compile(r"(users|groups)/([1-9][0-9]{0,11})")
PAGE_SIZE = 50  # the most items one request may name (the API's own limit)
WRITE_TOKEN = re.compile(r"[0-9a-f]{32}")
# What is never a library paper: the rest (books, articles, preprints...) are, with a title.
NOT_PAPERS = frozenset({"note", "attachment", "annotation"})
_MAX_NAME = 200
# Bidirectional embeddings, overrides and isolates: a title holding one could make the
# text after it read backwards on a page; what Zotero holds is shown without them.
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


class ZoteroAnswerError(Exception):
    """An answer that is not what the API documents (one line, no secret in it)."""


@dataclass(frozen=True, slots=True)
class KeyAccess:
    """What ``/keys/current`` says a key may do."""

    user_id: int
    username: str
    user_read: bool
    user_write: bool
    groups: Mapping[str, bool]  # group id (or "all") -> may write

    def library(self, choice: str) -> str:
        """The API path of the library *choice* names: "" or "user" (the key's own), or
        "group:ID" / "groups/ID"; ``ValueError`` (one line) for anything else."""
        choice = choice.strip().lower()
        if choice in ("", "user", "users", "my library"):
            return f"users/{self.user_id}"
        group = re.fullmatch(r"(?:group:|groups/)\s*([1-9][0-9]{0,11})", choice)
        if group is None:
            raise ValueError('the library is "user" (your own) or "group:ID" (a group\'s number)')
        return f"groups/{group.group(1)}"

    def can_read(self, library: str) -> bool:
        kind, _, number = library.partition("/")
        if kind == "users":
            return self.user_read and number == str(self.user_id)
        return number in self.groups or "all" in self.groups

    def can_write(self, library: str) -> bool:
        kind, _, number = library.partition("/")
        if kind == "users":
            return self.user_write and number == str(self.user_id)
        return self.groups.get(number, self.groups.get("all", False))


def what_it_can(can_write: bool) -> str:
    """The one line the manage page and ``subscribers show`` say of a connection."""
    return "read and save to your library" if can_write else "read only"


def read_json(body: bytes) -> object:
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ZoteroAnswerError(f"not UTF-8 (byte {error.start})") from None
    except RecursionError:
        raise ZoteroAnswerError("not JSON: nested too deep") from None
    except ValueError as error:  # JSONDecodeError, or a number of thousands of digits
        raise ZoteroAnswerError(f"not JSON ({' '.join(str(error).split())[:80]})") from None


def _object(value: object, what: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise ZoteroAnswerError(f"{what} is not a JSON object")
    return value


def _flag(value: object) -> bool:
    return value is True or value == 1


def read_key(body: bytes) -> KeyAccess:
    data = _object(read_json(body), "the key's description")
    user_id = data.get("userID")
    if type(user_id) is not int or not 0 < user_id < 10**12:
        raise ZoteroAnswerError("the key's description has no userID")
    access = _object(data.get("access", {}), "the key's access")
    user = _object(access.get("user", {}), "the key's user access")
    groups = _object(access.get("groups", {}), "the key's group access")
    writable = {}
    for group, rights in list(groups.items())[:1000]:
        if isinstance(rights, dict) and (group == "all" or re.fullmatch(r"[1-9][0-9]{0,11}", group)):
            if _flag(rights.get("library")):
                writable[group] = _flag(rights.get("write"))
    return KeyAccess(
        user_id,
        storable(one_line(_text(data.get("username"))))[:_MAX_NAME],
        _flag(user.get("library")),
        _flag(user.get("library")) and _flag(user.get("write")),
        writable,
    )


def library_version(headers: Mapping[str, str]) -> int:
    """``Last-Modified-Version``, which every answer of a library carries."""
    value = headers.get("Last-Modified-Version", "")
    if not value.isdigit() or len(value) > 15:
        raise ZoteroAnswerError("no Last-Modified-Version header")
    return int(value)


def read_versions(body: bytes) -> dict[str, int]:
    """``?format=versions``: each object's key and version."""
    data = _object(read_json(body), "the versions")
    versions = {}
    for key, version in data.items():
        if not ITEM_KEY.fullmatch(key) or type(version) is not int or version < 0:
            raise ZoteroAnswerError(f"the versions name {key[:20]!r}, not an object key and its version")
        versions[key] = version
    return versions


def read_deleted(body: bytes) -> list[str]:
    """``/deleted``: the keys of the items deleted since."""
    items = _object(read_json(body), "the deleted objects").get("items", [])
    if not isinstance(items, list) or not all(isinstance(k, str) and ITEM_KEY.fullmatch(k) for k in items):
        raise ZoteroAnswerError("the deleted objects' items are not a list of keys")
    return list(dict.fromkeys(items))


@dataclass(frozen=True, slots=True)
class ZoteroItem:
    key: str
    version: int
    item_type: str
    title: str
    abstract: str
    identifiers: tuple[str, ...]  # DOI, URL, extra, archive id: where an arXiv id or a DOI may be
    collections: frozenset[str]
    trashed: bool


def read_items(body: bytes) -> list[ZoteroItem]:
    """A list of items as the API answers ``/items`` (JSON, each with its ``data``)."""
    data = read_json(body)
    if not isinstance(data, list):
        raise ZoteroAnswerError("the items are not a JSON list")
    return [_item(value, n) for n, value in enumerate(data, start=1)]


def _text(value: object) -> str:
    return _BIDI_CONTROLS.sub("", value) if isinstance(value, str) else ""


def _item(value: object, n: int) -> ZoteroItem:
    outer = _object(value, f"item {n}")
    data = _object(outer.get("data", {}), f"item {n}'s data")
    key, version = data.get("key", outer.get("key")), data.get("version", outer.get("version"))
    if not (isinstance(key, str) and ITEM_KEY.fullmatch(key)) or type(version) is not int or version < 0:
        raise ZoteroAnswerError(f"item {n} has no key and version")
    collections = data.get("collections", [])
    ids = tuple(_text(data.get(name)) for name in ("DOI", "url", "extra", "archiveID", "repository"))
    return ZoteroItem(
        key,
        version,
        _text(data.get("itemType"))[:40],
        _text(data.get("title")),
        _text(data.get("abstractNote")),
        tuple(i[:2000] for i in ids if i),
        frozenset(c for c in collections if isinstance(c, str)) if isinstance(collections, list) else frozenset(),
        _flag(data.get("deleted")),
    )


def paper_from(item: ZoteroItem, collections: frozenset[str]) -> LibraryPaper | None:
    """The library paper an item is, through the identity rule a library file's records
    go through; None for a note, an attachment, an item in the trash, one without a
    title, or one outside *collections* (empty: every item counts)."""
    if item.item_type in NOT_PAPERS or item.trashed or not item.title.strip():
        return None
    if collections and not collections & item.collections:
        return None
    return paper_of(plain(item.title), plain(item.abstract), item.identifiers, "zotero")


def read_collections(body: bytes) -> list[tuple[str, str]]:
    """``/collections``: each collection's key and name."""
    data = read_json(body)
    if not isinstance(data, list):
        raise ZoteroAnswerError("the collections are not a JSON list")
    found = []
    for n, value in enumerate(data, start=1):
        inner = _object(_object(value, f"collection {n}").get("data", {}), f"collection {n}'s data")
        key = inner.get("key")
        if isinstance(key, str) and ITEM_KEY.fullmatch(key):
            found.append((key, storable(one_line(_text(inner.get("name"))))[:_MAX_NAME] or key))
    return found


def next_link(headers: Mapping[str, str]) -> str | None:
    """The ``rel="next"`` address of a ``Link`` header, if any."""
    for part in headers.get("Link", "")[:4000].split(","):
        target, _, params = part.partition(";")
        if re.search(r'rel="?next"?', params):
            return target.strip().strip("<>") or None
    return None


def wait_asked(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds ``Retry-After`` (or, failing it, ``Backoff``) asks to wait; None when neither."""
    for name in ("Retry-After", "Backoff"):
        value = headers.get(name, "").strip()
        if not value:
            continue
        if re.fullmatch(r"[0-9]{1,9}(\.[0-9]{1,6})?", value):
            return float(value)
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    return None


def new_item(content: EntryContent, title: str, abstract: str, url: str, collection: str | None) -> dict[str, object]:
    """The item a saved entry becomes: a preprint (arXiv) or a journal article (a DOI),
    else a web page; *title* and *abstract* as text, *url* its page."""
    kind = "preprint" if content.arxiv_id else "journalArticle" if content.doi else "webpage"
    item: dict[str, object] = {
        "itemType": kind,
        "title": title[:2000],
        "creators": [_creator(name) for name in content.authors[:100]],
        "abstractNote": abstract[:20_000],
        "date": content.published.isoformat() if content.published else "",
        "url": url[:2000],
        "tags": [],
        "collections": [collection] if collection else [],
        "relations": {},
    }
    if kind == "webpage" and content.kind is EntryKind.REPO:
        item["websiteType"] = "Code repository"
    if content.doi and kind != "webpage":
        item["DOI"] = content.doi
    if content.arxiv_id:
        item["repository"] = "arXiv"
        item["archiveID"] = f"arXiv:{content.arxiv_id}"
    return item


def _creator(name: str) -> dict[str, str]:
    name = one_line(name)[:200]
    first, _, last = name.rpartition(" ")
    if first and last:
        return {"creatorType": "author", "firstName": first, "lastName": last}
    return {"creatorType": "author", "name": name}


def written_key(body: bytes) -> str:
    """The key of the one item a write made (``successful``/``success``) or found the
    same (``unchanged``); ``ZoteroAnswerError`` naming why when it ``failed``."""
    data = _object(read_json(body), "the write's answer")
    for name in ("successful", "success", "unchanged"):
        done = data.get(name)
        if isinstance(done, dict) and "0" in done:
            value = done["0"]
            key = value.get("key") if isinstance(value, dict) else value
            if isinstance(key, str) and ITEM_KEY.fullmatch(key):
                return key
    failed = data.get("failed")
    if isinstance(failed, dict) and isinstance(failed.get("0"), dict):
        said = failed["0"]
        raise ZoteroAnswerError(f"Zotero refused the item: {one_line(_text(said.get('message')))[:200]}")
    raise ZoteroAnswerError("the write's answer names no item")


def same_paper(items: Iterable[ZoteroItem], doi: str | None, arxiv_id: str | None) -> str | None:
    """The key of an item already in the library that is the paper with *doi* or
    *arxiv_id* (what a search for either found may only mention it)."""
    for item in items:
        if item.trashed:
            continue
        paper = paper_of(item.title or "-", "", item.identifiers, "zotero")
        if paper is not None and ((doi and paper.doi == doi) or (arxiv_id and paper.arxiv_id == arxiv_id)):
            return item.key
    return None
