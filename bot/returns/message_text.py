"""Returned mail: a message's text read within bounds, whatever its bytes (parts and
lines cut before any pattern runs over them), its headers decoded, and the lines a
person wrote.  Pure: bytes and messages in, text out; never the store or the mailbox.
"""

from __future__ import annotations

import codecs
import re
from email.header import decode_header, make_header
from email.message import Message
from email.utils import getaddresses

from bot.domain.text import one_line

TEXT_CHARACTERS = 300_000  # of a message's text, searched for status codes and tokens
TEXT_LINES = 500  # of each text part, for flufl.bounce (a bounce says what it must in a few dozen)
PART_BYTES = 100_000
MAX_PARTS = 20
BLANK_RUN = re.compile(rb"\n(?:[ \t\r]*\n){2,}")


def bounded(message: Message) -> Message:
    """*message* cut to what telling a bounce needs, so that the work is bounded whatever
    the bytes: flufl.bounce tries dozens of patterns on every line of every text part
    (about 40 µs a line: a part of a megabyte of newlines took 23 s).  At most
    ``MAX_PARTS`` parts are kept, and each text part keeps its first ``TEXT_LINES`` lines
    (a run of blank lines counted as one) of at most ``PART_BYTES``.  Headers and
    delivery-status fields are kept; a From header no address can be read from (an empty
    one) is read as no address, which flufl.bounce's detectors need."""
    if "from" in message and not getaddresses([str(value) for value in message.get_all("from", [])]):
        del message["from"]
        message["From"] = "<>"
    kept = 0
    for part in message.walk():
        kept += 1
        if part.is_multipart():
            room = max(0, MAX_PARTS - kept)
            payload = part.get_payload()
            if isinstance(payload, list) and len(payload) > room:
                part.set_payload(payload[:room])
            continue
        if part.get_content_maintype() != "text":
            continue
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes) or (len(payload) <= PART_BYTES and payload.count(b"\n") <= TEXT_LINES):
            continue
        lines = BLANK_RUN.sub(b"\n\n", payload[:PART_BYTES]).split(b"\n", TEXT_LINES)[:TEXT_LINES]
        del part["content-transfer-encoding"]
        part.set_payload(b"\n".join(lines).decode("latin-1"))  # read back byte for byte (compat32)
    return message


def search_text(raw: bytes) -> str:
    return raw[: TEXT_CHARACTERS * 4].decode("latin-1")


def own_lines(text: str) -> list[str]:
    """The non-blank lines a person wrote: none quoted ("> "), none after the signature
    separator ("-- ")."""
    own = []
    for line in text.splitlines():
        if line.rstrip() == "--":
            break
        if line.strip() and not line.lstrip().startswith(">"):
            own.append(line.strip())
    return own


def decoded_header(header: object) -> str:
    if header is None:
        return ""
    try:
        return one_line(str(make_header(decode_header(str(header)))))
    except (LookupError, ValueError, UnicodeError):
        return one_line(str(header))


def text_of(message: Message, *, plain_only: bool = False) -> str:
    """The decoded text parts, up to ``TEXT_CHARACTERS``."""
    texts: list[str] = []
    size = 0
    for part in message.walk():
        wanted = part.get_content_type() == "text/plain" if plain_only else part.get_content_maintype() == "text"
        payload = part.get_payload(decode=True) if wanted else None
        if not isinstance(payload, bytes):
            continue
        charset = part.get_content_charset() or "latin-1"
        try:
            codecs.lookup(charset)
        except LookupError:
            charset = "latin-1"
        texts.append(payload.decode(charset, "replace"))
        size += len(texts[-1])
        if size >= TEXT_CHARACTERS:
            break
    return "\n".join(texts)[:TEXT_CHARACTERS]
