"""Returned mail, classifying: what one message in the returned-mail inbox is.

Pure: bytes in, a ``Returned`` out.  Bounces are found by flufl.bounce (RFC 3464
DSNs and the older formats of Exim, qmail, Exchange and others); the status code and
the server's words come from the DSN's per-recipient fields, read with the email
package, or else from the text.  A complaint is an ARF report (RFC 5965) of feedback
type ``abuse``.  An unsubscribe mail carries a subscriber's token, as the
List-Unsubscribe mailto's subject does.  An automatic reply (out of office) is never
a bounce or an unsubscribe.  Never reads the store, the mailbox or the network, and
never decides whose status changes: the service checks what a message names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email import message_from_bytes
from email.iterators import typed_subpart_iterator
from email.message import Message
from email.policy import compat32
from email.utils import getaddresses

from flufl.bounce import all_failures

from bot.domain import Returned, ReturnKind
from bot.domain.routes import MANAGE, UNSUBSCRIBE, WEB_VERSIONS
from bot.domain.text import CONTROL_CHARACTERS, one_line
from bot.mail.verp import digest_of
from bot.returns.message_text import (
    bounded,
    decoded_header,
    own_lines,
    search_text,
    text_of,
)

_TOKEN = r"(\d{1,18}\.[A-Za-z0-9_-]{24})(?![A-Za-z0-9_-])"
# "unsubscribe <token>": the subject our mailto sets, as typed, URL-encoded or form-encoded.
_UNSUBSCRIBE = re.compile(r"unsubscribe(?:\s+|%20|\+)" + _TOKEN, re.IGNORECASE)
_REPLY_PREFIX = re.compile(r"^(?:(?:re|aw|sv|fwd?|wg)\s*:\s*)+", re.IGNORECASE)
# A subscriber's own link (unsubscribe, manage, web version), as a quoted original shows it.
# A reader's signed token in a link of ours that a returned mail quotes.
_LINK_TOKEN = re.compile(
    "(?:" + "|".join(re.escape(r.prefix) for r in (UNSUBSCRIBE, MANAGE, WEB_VERSIONS)) + ")" + _TOKEN
)
_STATUS = re.compile(r"(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])")
_SMTP_REPLY = re.compile(r"(?<!\d)[45]\d\d[ -]")
_MAILBOX_FULL = re.compile(
    r"over ?quota|quota exceeded|mailbox (?:is )?full|insufficient (?:system )?storage", re.IGNORECASE
)
_VACATION_SUBJECT = re.compile(
    r"^\s*(?:auto(?:matic)?[ -]?(?:reply|response|antwort)|out of (?:the )?office|vacation|away\b|abwesen)",
    re.IGNORECASE,
)
_VACATION_HEADERS = ("x-autoreply", "x-autorespond", "x-auto-response-suppress", "x-vacation")
RECIPIENT_HEADERS = ("delivered-to", "x-original-to", "envelope-to", "x-envelope-to", "to", "cc")
CLASSIFIED_BYTES = 500_000  # a bounce says what it must near its start; the rest is its quote
DIAGNOSTIC_CHARACTERS = 300


@dataclass(frozen=True, slots=True)
class Addresses:
    """What the classifier must know of this deployment."""

    key: bytes  # the signing key, which signs VERP return paths
    bounce_address: str  # sender.bounce_address ("": VERP is off)
    unsubscribe_address: str  # where List-Unsubscribe's mailto goes


def classify(raw: bytes, known: Addresses) -> Returned:
    """What *raw* is.  Bytes that no parser makes sense of are ``OTHER``: left for a person.
    The work is bounded whatever the bytes (``bounded``)."""
    try:
        return _classify(bounded(message_from_bytes(raw[:CLASSIFIED_BYTES], policy=compat32)), raw, known)
    except Exception as exc:  # noqa: BLE001 - third-party heuristics over anyone's bytes; a person reads it instead
        return Returned(ReturnKind.OTHER, diagnostic=f"not readable as mail ({type(exc).__name__})")


def _classify(message: Message, raw: bytes, known: Addresses) -> Returned:
    report = _feedback_report(message)
    if report is not None:
        return _complaint(message, raw, report, known)
    temporary, permanent = all_failures(message)
    is_dsn = any(True for _ in typed_subpart_iterator(message, "message", "delivery-status"))
    vacation = _looks_like_vacation(message)
    if (temporary or permanent or is_dsn) and not (vacation and not is_dsn):
        found = _bounce(message, temporary, permanent)
        if found is not None:
            return _with_sender(found, message, raw, known)
    if vacation or message.get("auto-submitted", "no").strip().lower() != "no":
        return Returned(ReturnKind.OTHER, diagnostic="an automatic reply")
    token = _unsubscribe_token(message, known)
    if token is not None:
        return Returned(ReturnKind.UNSUBSCRIBE, token=token, addresses=_senders(message))
    return Returned(ReturnKind.OTHER)


# Bounces ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Recipient:
    action: str
    status: str
    diagnostic: str
    address: str


def _bounce(message: Message, temporary: frozenset[bytes], permanent: frozenset[bytes]) -> Returned | None:
    recipients = list(_dsn_recipients(message))
    addresses = _addresses(recipients, permanent or temporary)
    failed = [r for r in recipients if r.action.startswith(("fail", "error"))]
    if failed:
        status = failed[0].status or _status_in(failed[0].diagnostic)
        kind = _severity(status, failed[0].diagnostic)
        return Returned(kind, addresses=addresses, status=status, diagnostic=failed[0].diagnostic)
    delayed = [r for r in recipients if r.action.startswith("delay")]
    if delayed:
        return Returned(
            ReturnKind.DELAYED, addresses=addresses, status=delayed[0].status, diagnostic=delayed[0].diagnostic
        )
    if temporary and not permanent:
        return Returned(ReturnKind.DELAYED, addresses=addresses)
    if not permanent:
        return None  # a DSN reporting only deliveries ("relayed", "delivered"): nothing went wrong
    text = text_of(message)
    diagnostic = _diagnostic_line(text)
    status = _status_in(diagnostic) or _status_in(text)
    return Returned(_severity(status, text), addresses=addresses, status=status, diagnostic=diagnostic)


def _addresses(recipients: list[_Recipient], detected: frozenset[bytes]) -> tuple[str, ...]:
    """The DSN's own recipients first, then what flufl.bounce detected, once each."""
    named = tuple(r.address for r in recipients if r.address)
    found = sorted(a.decode("ascii", "replace").lower() for a in detected)
    return tuple(dict.fromkeys(a for a in named + tuple(found) if _plausible(a)))


def _plausible(address: str) -> bool:
    """An address a returned message may name: one ``@``, no space or control character,
    no longer than an address may be (RFC 5321)."""
    return (
        len(address) <= MAX_ADDRESS
        and address.count("@") == 1
        and " " not in address
        and not CONTROL_CHARACTERS.search(address)
    )


MAX_ADDRESS = 320


def _dsn_recipients(message: Message) -> Iterator[_Recipient]:
    """The per-recipient fields of every message/delivery-status part (RFC 3464, 2.3)."""
    for part in typed_subpart_iterator(message, "message", "delivery-status"):
        blocks = part.get_payload()
        if not isinstance(blocks, list):
            continue
        for block in blocks:
            if not isinstance(block, Message):
                continue
            action = str(block.get("action", "")).strip().lower()
            if not action:
                continue  # the per-message fields
            status = _STATUS.search(str(block.get("status", "")))
            address = _typed_address(block.get("original-recipient")) or _typed_address(block.get("final-recipient"))
            yield _Recipient(
                action=action,
                status=".".join(status.groups()) if status else "",
                diagnostic=_diagnostic(block.get("diagnostic-code")),
                address=address,
            )


def _typed_address(field: object) -> str:
    """``rfc822; ada@example.org`` -> ``ada@example.org``; "" for anything else."""
    if field is None:
        return ""
    kind, _, value = one_line(str(field)).partition(";")
    address = value.strip().strip("<>").lower()
    return address if kind.strip().lower() == "rfc822" and "@" in address else ""


def _diagnostic(field: object) -> str:
    """``smtp; 550 5.1.1 ...`` -> ``550 5.1.1 ...``, one line."""
    if field is None:
        return ""
    kind, semicolon, value = one_line(str(field)).partition(";")
    text = value if semicolon and re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", kind.strip()) else kind
    return text.strip()[:DIAGNOSTIC_CHARACTERS]


def _status_in(text: str) -> str:
    found = _STATUS.search(text)
    return ".".join(found.groups()) if found else ""


def _severity(status: str, words: str) -> ReturnKind:
    """Soft: a temporary failure (4.x.x) or a full mailbox (x.2.2, or the words for it)."""
    if status.startswith("4") or status.endswith(".2.2") or _MAILBOX_FULL.search(words):
        return ReturnKind.SOFT
    return ReturnKind.HARD


def _diagnostic_line(text: str) -> str:
    """The line of a bounce's text with the server's reply in it."""
    lines = [one_line(line) for line in text.splitlines()]
    for pattern in (_STATUS, _SMTP_REPLY):
        for line in lines:
            if pattern.search(line):
                return line[:DIAGNOSTIC_CHARACTERS]
    return ""


# Complaints ------------------------------------------------------------------------


def _feedback_report(message: Message) -> Message | None:
    """The machine-readable part of an ARF report (RFC 5965, 3.1), if *message* is one."""
    for part in typed_subpart_iterator(message, "message", "feedback-report"):
        fields = part.get_payload()
        if isinstance(fields, list) and fields and isinstance(fields[0], Message):
            return fields[0]
    return None


def _complaint(message: Message, raw: bytes, report: Message, known: Addresses) -> Returned:
    feedback_type = one_line(str(report.get("feedback-type", ""))).lower()
    if feedback_type != "abuse":
        return Returned(ReturnKind.OTHER, diagnostic=f"a feedback report of type {feedback_type or 'none'}")
    agent = one_line(str(report.get("user-agent", "")))
    addresses = [a for _, a in getaddresses([str(v) for v in report.get_all("original-rcpt-to", [])]) if "@" in a]
    for original in _originals(message):
        addresses += [a for _, a in getaddresses([str(v) for v in original.get_all("to", [])]) if "@" in a]
    text = search_text(raw)
    token = _LINK_TOKEN.search(text) or _UNSUBSCRIBE.search(text)
    return Returned(
        ReturnKind.COMPLAINT,
        digest_id=_verp_digest(message, text, known),
        token=token.group(1) if token else None,
        addresses=tuple(dict.fromkeys(a.lower() for a in addresses)),
        diagnostic=f"abuse report{f' from {agent}' if agent else ''}"[:DIAGNOSTIC_CHARACTERS],
    )


def _originals(message: Message) -> Iterator[Message]:
    """The reported message's headers: a message/rfc822 or text/rfc822-headers part."""
    for part in typed_subpart_iterator(message, "message", "rfc822"):
        inner = part.get_payload()
        if isinstance(inner, list) and inner and isinstance(inner[0], Message):
            yield inner[0]
    for part in typed_subpart_iterator(message, "text", "rfc822-headers"):
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes):
            yield message_from_bytes(payload, policy=compat32)


# Who a bounce or report is about ---------------------------------------------------


def _with_sender(found: Returned, message: Message, raw: bytes, known: Addresses) -> Returned:
    text = search_text(raw)
    token = _LINK_TOKEN.search(text)
    return Returned(
        found.kind,
        digest_id=_verp_digest(message, text, known),
        token=token.group(1) if token else None,
        addresses=found.addresses,
        status=found.status,
        diagnostic=found.diagnostic,
    )


@functools.lru_cache(maxsize=8)
def _verp_pattern(bounce_address: str) -> re.Pattern[str]:
    local, _, domain = bounce_address.rpartition("@")
    return re.compile(re.escape(local) + r"\+d\d{1,18}\.[A-Za-z2-7]{16}@" + re.escape(domain), re.IGNORECASE)


def _verp_digest(message: Message, text: str, known: Addresses) -> int | None:
    """The digest a signed VERP address names: in the headers the bounce was delivered
    under, else anywhere in it (the quoted original's Return-Path)."""
    if not known.bounce_address:
        return None
    pattern = _verp_pattern(known.bounce_address)
    headers = " ".join(str(v) for name in RECIPIENT_HEADERS for v in message.get_all(name, []))
    for where in (headers, text):
        for candidate in pattern.findall(where):
            digest_id = digest_of(known.key, known.bounce_address, candidate)
            if digest_id is not None:
                return digest_id
    return None


# Unsubscribe mails and automatic replies -------------------------------------------


def _looks_like_vacation(message: Message) -> bool:
    """An out-of-office reply (RFC 3834 and what the common servers add), by its
    subject or headers; not by Auto-Submitted alone, which bounces carry too."""
    if any(message.get(name) is not None for name in _VACATION_HEADERS):
        return True
    if str(message.get("precedence", "")).strip().lower() == "auto_reply":
        return True
    return bool(_VACATION_SUBJECT.search(decoded_header(message.get("subject"))))


def _unsubscribe_token(message: Message, known: Addresses) -> str | None:
    """The token of a message that is an unsubscribe request itself: its subject is
    exactly "unsubscribe <token>" (what our mailto sets), or it went to the unsubscribe
    address and its own words, quoting and a signature aside, are that line alone.
    A reply that says anything else (with the digest below it, footer and all) is for
    a person."""
    found = _UNSUBSCRIBE.fullmatch(_REPLY_PREFIX.sub("", decoded_header(message.get("subject")).strip()))
    if found:
        return found.group(1)
    recipients = [
        a.lower() for _, a in getaddresses([str(v) for n in RECIPIENT_HEADERS for v in message.get_all(n, [])])
    ]
    if not known.unsubscribe_address or known.unsubscribe_address.lower() not in recipients:
        return None
    own = own_lines(text_of(message, plain_only=True))
    found = _UNSUBSCRIBE.fullmatch(own[0]) if len(own) == 1 else None
    return found.group(1) if found else None


def _senders(message: Message) -> tuple[str, ...]:
    return tuple(a.lower() for _, a in getaddresses([str(v) for v in message.get_all("from", [])]) if _plausible(a))
