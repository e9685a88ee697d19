"""Message stage: single header lines and body lines as the simple path writes them.

The splice (``bot.mail.splice``) fills a template with these bytes, and they
must be exactly what ``message.build_message`` would write: fast paths for
the plain values, the email package's own folding for everything else.
Pure functions of their arguments; never reads the store, never sends.
"""

from __future__ import annotations

import re
from email.headerregistry import Address
from functools import lru_cache

from bot.mail.message import POLICY, display_name

# Values the email package writes verbatim (checked against it in tests/test_splice.py).
_SIMPLE_NAME = re.compile(r"[A-Za-z0-9]+(?: [A-Za-z0-9]+)*")
_SIMPLE_ADDRESS = re.compile(r"[A-Za-z0-9._+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_PLAIN_VALUE = re.compile(r"[\x21-\x7e]+(?: [\x21-\x7e]+)*")
_SHORT = 900  # well under the 998 where the policy would fold


def html_escape(value: str, *, attribute: bool) -> str:
    """*value* as the inliner's HTML serializer writes it: & and no-break space
    always, the double quote inside attributes, < and > outside them."""
    value = value.replace("&", "&amp;").replace("\u00a0", "&nbsp;")
    if attribute:
        return value.replace('"', "&quot;")
    return value.replace("<", "&lt;").replace(">", "&gt;")


def folded(name: str, value: object) -> bytes:
    """The header line exactly as the message's policy writes it (slow: parses)."""
    return POLICY.fold_binary(*POLICY.header_store_parse(name, value))


def plain_line(name: str, value: str) -> bytes:
    if len(value) < _SHORT and "=?" not in value and _PLAIN_VALUE.fullmatch(value):
        return f"{name}: {value}\r\n".encode("ascii")
    return folded(name, value)


@lru_cache(maxsize=64)
def date_line(value: str) -> bytes:
    """The Date line: the policy re-parses dates (two-digit years...), so always
    its own output; one batch shares one time, hence the cache."""
    return folded("Date", value)


def to_line(name: str, address: str) -> bytes:
    name = display_name(name)
    if len(name) + len(address) < _SHORT and _SIMPLE_ADDRESS.fullmatch(address):
        if not name:
            return f"To: {address}\r\n".encode("ascii")
        if _SIMPLE_NAME.fullmatch(name):
            return f"To: {name} <{address}>\r\n".encode("ascii")
    return folded("To", Address(display_name=name, addr_spec=address))
