"""Text rules every stage shares: what counts as a control character, a one-line
value and a web link.  Pure functions; never reads or writes anything.
"""

from __future__ import annotations

import re

# C0/C1 controls and the Unicode line/paragraph separators: never part of a name,
# title, tag or address, and a way to smuggle line breaks into a mail header.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# A whole http(s) link: no whitespace, quotes, angle brackets or control characters
# (brackets are fine: DOI URLs have them).
_WEB_URL = re.compile(r"https?://[^\s<>\"'\x00-\x1f\x7f]+", re.IGNORECASE)


def one_line(text: str | None) -> str:
    """*text* with control characters and runs of whitespace folded to single spaces."""
    return " ".join(CONTROL_CHARACTERS.sub(" ", text or "").split())


def is_web_url(url: str | None) -> bool:
    return bool(url) and _WEB_URL.fullmatch(url or "") is not None
