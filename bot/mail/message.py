"""Message stage: a rendered digest into an RFC 5322 multipart/alternative email.

Text part first, then HTML; display names and subjects are encoded by the
email package (RFC 2047), never concatenated into raw header lines.  Every
value goes through ``header_text`` first: control characters folded and any
encoded word already decoded, so no value can become a line break, a new
header or a new MIME part, however it decodes.
Never renders, never sends.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime
from email.generator import BytesGenerator
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime

from email_validator import EmailNotValidError, validate_email

from bot.config import SenderConfig, feedback_id_of
from bot.domain import RenderedDigest
from bot.domain.text import header_text
from bot.mail.qp import QP_LINE_LENGTH, text_part

# Python's folder drops the quotes of a display name it has to fold (a name of
# "Bcc: x@y.z ..." near 998 characters became a group and an address): names are
# cut well below any folding, as clean_name() does at input.
MAX_DISPLAY_NAME = 200


def display_name(text: str | None) -> str:
    """*text* as the display name of an address header: one line, decoded, short."""
    return header_text(text)[:MAX_DISPLAY_NAME].rstrip()


def envelope_address(address: str) -> str:
    """The address as the SMTP envelope needs it: IDN domains in their ASCII form."""
    if address.isascii():
        _, at, domain = address.rpartition("@")
        if at and domain == domain.lower():
            # What validate_email gives such an address anyway (it only lower-cases
            # an ASCII domain), without its cost on every message of the send path;
            # tests/test_deliver.py compares the two on generated addresses.
            return address
    try:
        checked = validate_email(address, check_deliverability=False)
    except EmailNotValidError:
        return address
    return checked.ascii_email or checked.normalized


@dataclass(frozen=True, slots=True)
class Envelope:
    sender: str
    recipient: str


@dataclass(frozen=True, slots=True)
class Headers:
    """Per-message header values (everything that differs between two subscribers)."""

    to_name: str
    to_address: str
    message_id: str
    date: datetime
    list_unsubscribe: tuple[str, ...]  # URIs, https first when there is one
    resend_of: str | None = None


# Header lines are not folded below RFC 5322's hard limit: a folded
# List-Unsubscribe starts with whitespace that some parsers keep.
POLICY = SMTP.clone(max_line_length=998)
# The parts are encoded under this policy (76-character quoted-printable lines).
PART_POLICY = POLICY.clone(max_line_length=QP_LINE_LENGTH)
# Fixed, so that one message is the same bytes however it is built (bot.mail.splice).
# Safe because both parts are quoted-printable, where "=_" cannot occur.
BOUNDARY = "=_digestbot_alternative"


def build_message(rendered: RenderedDigest, headers: Headers, sender: SenderConfig) -> EmailMessage:
    msg = EmailMessage(policy=POLICY)
    msg["Subject"] = header_text(rendered.subject)
    msg["From"] = Address(display_name=display_name(sender.from_name), addr_spec=sender.from_address)
    msg["To"] = Address(display_name=display_name(headers.to_name), addr_spec=envelope_address(headers.to_address))
    msg["Date"] = format_datetime(headers.date)
    msg["Message-ID"] = headers.message_id
    msg["List-Id"] = f"{display_name(sender.from_name)} <{sender.list_id}>"
    msg["List-Unsubscribe"] = ", ".join(f"<{uri}>" for uri in headers.list_unsubscribe)
    if any(uri.startswith("https://") for uri in headers.list_unsubscribe):
        # RFC 8058 one-click needs an https URI that accepts the POST.
        msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    # Auto-Submitted (RFC 3834) alone tells responders not to answer; Precedence is not
    # standard (RFC 2076 advises against it) and some filters count it against bulk mail.
    msg["Auto-Submitted"] = "auto-generated"
    if feedback_id_of(sender):
        msg["Feedback-ID"] = feedback_id_of(sender)
    if headers.resend_of:
        msg["X-Digestbot-Resend-Of"] = headers.resend_of
    msg.policy = PART_POLICY  # the email package encodes a body at its policy's line length
    try:
        msg.set_content(
            rendered.text, subtype="plain", charset="utf-8", cte="quoted-printable", content_manager=text_part
        )
        msg.add_alternative(
            rendered.html, subtype="html", charset="utf-8", cte="quoted-printable", content_manager=text_part
        )
    finally:
        msg.policy = POLICY
    msg.set_boundary(BOUNDARY)
    return msg


class _Generator(BytesGenerator):
    """The email package's generator, writing a body's lines in one piece: its own
    writes each line and line end by itself (most of the time ``as_bytes`` takes)."""

    def _write_lines(self, lines: str) -> None:
        if "\r" in lines:  # it also ends lines at a lone CR: its own way, then
            super()._write_lines(lines)  # type: ignore[misc]
        elif lines:
            self.write(lines.replace("\n", self._NL))  # type: ignore[attr-defined]


def message_bytes(msg: EmailMessage) -> bytes:
    """``msg.as_bytes()``, the same bytes (tests/test_splice.py compares them), faster."""
    out = io.BytesIO()
    _Generator(out, mangle_from_=False, policy=msg.policy).flatten(msg)
    return out.getvalue()


@dataclass(frozen=True, slots=True, eq=False)
class SmtpData:
    """A message in the form SMTP's DATA carries it: CRLF line ends, lines that
    begin with a dot doubled, ``.\r\n`` at the end.  ``size`` is the message's
    own length, as the SIZE extension counts it.

    The bytes are kept in *parts*, joined only when written: a spliced message's
    constant parts are its template's own objects, so a batch of messages holds
    (and pickles, from a build process) each body once, not once per subscriber."""

    parts: tuple[bytes, ...]
    size: int

    @property
    def wire(self) -> bytes:
        return b"".join(self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SmtpData) and self.size == other.size and self.wire == other.wire

    def __hash__(self) -> int:
        return hash((self.wire, self.size))


def dot_stuff(lines: bytes) -> bytes:
    """Whole CRLF-ended lines with each leading dot doubled (RFC 5321 4.5.2)."""
    stuffed = lines.replace(b"\r\n.", b"\r\n..")
    return b"." + stuffed if stuffed.startswith(b".") else stuffed


def prepared(message: bytes) -> SmtpData | None:
    """*message* for DATA when it has CRLF line ends everywhere (every message
    this module builds does); None for anything else."""
    crlf = message.count(b"\r\n")
    if message.count(b"\n") != crlf or message.count(b"\r") != crlf:
        return None
    if not message.endswith(b"\r\n"):
        message += b"\r\n"
    return SmtpData((dot_stuff(message), b".\r\n"), len(message))


def envelope_for(headers: Headers, sender: SenderConfig) -> Envelope:
    return Envelope(sender=envelope_address(sender.from_address), recipient=envelope_address(headers.to_address))
