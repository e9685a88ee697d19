"""Message stage, body encoding: quoted-printable line by line, as the email package
writes it.

Each line's encoding depends on that line alone, so a line is encoded once and
kept: a day's bodies share most of their lines (the same entries), and a body's
subscribers share all but a few.  ``text_part`` hands the email package a part
encoded this way; tests/test_splice.py checks the bytes are the package's own.
Pure functions of their arguments; never reads the store, never sends.
"""

from __future__ import annotations

from email.contentmanager import ContentManager, raw_data_manager
from email.message import EmailMessage
from email.quoprimime import body_encode
from functools import lru_cache

# Quoted-printable body lines, soft line breaks included, are at most 76 characters
# (RFC 2045 6.7).
QP_LINE_LENGTH = 76


def _qp_line(line: bytes) -> bytes:
    return body_encode(line.decode("latin-1"), QP_LINE_LENGTH, "\r\n").encode("ascii") + b"\r\n"


# Bounded: a day's bodies share their lines with the few built just before them (bench/README.md).
_qp_line_cached = lru_cache(maxsize=8192)(_qp_line)


def qp_lines(data: bytes, *, cached: bool = False) -> bytes:
    """Quoted-printable as the email package encodes a text part, CRLF line ends."""
    return b"".join(map(_qp_line_cached if cached else _qp_line, data.splitlines()))


def _set_text(
    msg: EmailMessage, string: str, subtype: str = "plain", charset: str = "utf-8", cte: str | None = None
) -> None:
    """The standard handler's part, its quoted-printable body made from cached lines."""
    if cte != "quoted-printable" or charset != "utf-8":
        raw_data_manager.set_content(msg, string, subtype, charset=charset, cte=cte)
        return
    raw_data_manager.set_content(msg, "", subtype, charset=charset, cte=cte)  # the headers, in the package's order
    encoded = qp_lines(string.encode("utf-8"), cached=True)
    # The package's payload has "\n" line ends (the generator writes the policy's), and
    # an empty body is one empty line.
    msg.set_payload(encoded.replace(b"\r\n", b"\n").decode("ascii") if encoded else "\n")


text_part = ContentManager()
text_part.add_set_handler(str, _set_text)
