"""Text rules every stage shares: what counts as a control character, a one-line
value and a web link.  Pure functions; never reads or writes anything.
"""

from __future__ import annotations

import html
import os
import re
from email.policy import default as _default_policy

# C0/C1 controls and the Unicode line/paragraph separators: never part of a name,
# title, tag or address, and a way to smuggle line breaks into a mail header.  Lone
# surrogates too: they stand for bytes that were not UTF-8 and cannot be stored.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Unicode's noncharacters (U+FDD0-U+FDEF and the last two code points of every plane):
# never text a person typed, and U+FFFE and U+FFFF are not XML.
_NONCHARACTERS = "\ufdd0-\ufdef" + "".join(
    f"{chr(plane + 0xFFFE)}{chr(plane + 0xFFFF)}" for plane in range(0, 0x110000, 0x10000)
)
# What no name, address, filter or interest a person typed holds: the control characters
# above, DEL and the C1 controls among them, and the noncharacters.
NOT_TYPED = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029\\ud800-\\udfff{_NONCHARACTERS}]")
# What neither store can hold (NUL: PostgreSQL's text; a lone surrogate: UTF-8) and
# what XML 1.0 cannot carry (the other C0 controls but tab and line breaks, U+FFFE and
# U+FFFF): text from outside loses them once, when it is read (``storable``).
NOT_STORABLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
# A whole http(s) link: no whitespace, quotes, angle brackets or control characters
# (brackets are fine: DOI URLs have them).
_WEB_URL = re.compile(r"https?://[^\s<>\"'\x00-\x1f\x7f]+", re.IGNORECASE)


def storable(text: str) -> str:
    """*text* as either store and an XML document can hold it: NUL and the other
    characters of ``NOT_STORABLE`` left out, a lone surrogate as U+FFFD."""
    if not NOT_STORABLE.search(text):
        return text
    return NOT_STORABLE.sub(_storable_character, text)


def _storable_character(match: re.Match[str]) -> str:
    return "\ufffd" if "\ud800" <= match.group() <= "\udfff" else ""


def plural(count: int, noun: str, many: str = "") -> str:
    """``1 entry``, ``2 entries``: *many* when adding an s is wrong."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {many or noun + 's'}"


def domain_of(address: str) -> str:
    """The domain of an address (``localhost`` when it has none)."""
    return address.rpartition("@")[2] or "localhost"


def one_line(text: str | None) -> str:
    """*text* with control characters and runs of whitespace folded to single spaces."""
    if text and text.isprintable() and "  " not in text and text[0] != " " and text[-1] != " ":
        return text  # the common case, five times as fast: no control character, only single spaces
    return " ".join(CONTROL_CHARACTERS.sub(" ", text or "").split())


# A decoded encoded word can spell another one ("=?utf-8?q?=3D=3Futf-8...?="): decoding
# repeats until nothing changes, and a value still changing after this many rounds is
# refused its word openers instead.
_MAX_DECODE_ROUNDS = 8


def header_text(text: str | None) -> str:
    """*text* as a header may carry it: one line, with every RFC 2047 encoded word decoded.

    Python's ``email`` package decodes encoded words in the header values it is
    given and writes what they decode to back out raw, so ``=?utf-8?q?x=0D=0ABcc:...?=``
    would become a line break and a new header.  The value is decoded here with that
    same parser until it no longer changes, folding control characters and line
    breaks each time, so what the package decodes is exactly what this returns.
    """
    value = one_line(text)
    for _ in range(_MAX_DECODE_ROUNDS):
        if "=?" not in value:
            return value
        decoded = one_line(_decoded_words(value))
        if decoded == value:
            return value
        value = decoded
    return value.replace("=?", "= ?")


# The store's tag columns; the case-folded name must fit too ("ß" folds to "ss").
MAX_TAG_LENGTH = 100


def tag_label(text: str | None) -> str:
    """A tag as a source gave it, ready to store and to print in a Subject."""
    label = header_text(text)[:MAX_TAG_LENGTH]
    while len(label.casefold()) > MAX_TAG_LENGTH:
        label = label[:-1]
    return label.rstrip()


def hides_control_characters(text: str) -> bool:
    """Whether an encoded word in *text* decodes, at any depth, to a control character."""
    value = text
    for _ in range(_MAX_DECODE_ROUNDS):
        if "=?" not in value:
            return False
        decoded = _decoded_words(value)
        if CONTROL_CHARACTERS.search(decoded):
            return True
        if decoded == value:
            return False
        value = decoded
    return True


def _decoded_words(value: str) -> str:
    """*value* as the email package reads a header: its encoded words decoded."""
    return str(_default_policy.header_factory("X-Value", value))


def path_text(path: str | os.PathLike[str]) -> str:
    """A file path as it is stored and shown: bytes that are not UTF-8 as ``\\xff`` and
    control characters as ``\\n``, so any name is one printable line."""
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return CONTROL_CHARACTERS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def is_utf8_name(path: str | os.PathLike[str]) -> bool:
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def shown_url(url: str) -> str:
    """*url* as it may be printed, logged and stored: a password (or a lone user name,
    often a token) in it as ``***``."""
    authority_at = url.find("://") + 3
    if authority_at < 3:
        return url
    ends = [at for at in (url.find(c, authority_at) for c in "/?#") if at >= 0]
    authority_end = min(ends, default=len(url))
    userinfo, at, host = url[authority_at:authority_end].rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    masked = f"{user}:***" if colon else "***"
    return f"{url[:authority_at]}{masked}@{host}{url[authority_end:]}"


def is_web_url(url: str | None) -> bool:
    return bool(url) and _WEB_URL.fullmatch(url or "") is not None


PROSE_URL = re.compile(r"https?://[^\s<>\"'\[\]()]+", re.IGNORECASE)  # in prose: stops at brackets


def urls_in(text: str) -> tuple[str, ...]:
    """URLs a summary names, in order, without trailing sentence punctuation."""
    if "://" not in text:  # the common case; the case-insensitive regex scans every character
        return ()
    seen: dict[str, None] = {}
    for match in PROSE_URL.finditer(text):
        seen.setdefault(match.group(0).rstrip(".,;:!?"), None)
    return tuple(seen)


def html_text(fragment: str) -> str:
    """The text of an HTML fragment on one line (an Atom ``type="html"`` title): tags
    dropped, entities decoded."""
    import nh3  # here: the CLI imports this module, and most commands read no HTML

    return one_line(html.unescape(nh3.clean(fragment, tags=set(), clean_content_tags={"script", "style"})))
