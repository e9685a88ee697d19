"""Message stage, fast path: the probe.  A subscriber whose address and token are
marker strings gets the simple path's message (``ProbeMessage``), which is then cut at
the markers into the pieces a ``bot.mail.splice.MessageTemplate`` fills: constant bytes,
and what is made for each subscriber (a header line, a line holding their address or
token, the text footer).  Cuts only where the splice reproduces the bytes exactly and
says None elsewhere.  Never reads the store, never sends.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import format_datetime

from bot.config import SenderConfig
from bot.domain import DigestContent, RenderedDigest
from bot.mail.header_lines import date_line, html_escape, plain_line, to_line
from bot.mail.message import Headers, build_message, message_bytes
from bot.mail.personal_slots import (
    RecipientValues,
    line_spans,
    lines_around,
    spliced_line,
)
from bot.mail.qp import qp_lines
from bot.mail.render import Links, Renderer, personal_context

LinksFor = Callable[[str], tuple[Links, tuple[str, ...]]]  # token -> (footer links, List-Unsubscribe URIs)

# Escaped differently in HTML text and attributes: the probe address carries
# them so that its serialized form shows which escaping each place uses.
HTML_SPECIALS = "&\"<>'\u00a0"
PROBE_DATE = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)
PROBE_NAME = "Probe Reader"
PROBE_ADDRESS = "probe@example.org"


Piece = bytes | Callable[[RecipientValues, Links], bytes]


@dataclass(frozen=True, slots=True)
class ProbeMarks:
    """The probe's marker strings: its token, the address between two marks, and
    the nonce none of the constant bytes may still contain."""

    token: bytes
    email_mark: bytes
    email_end: bytes
    marker: bytes


# How HTML prints the probe's specials in text and in attributes.
HTML_FORMS = {
    html_escape(HTML_SPECIALS, attribute=False).encode("utf-8"): "email_text",
    html_escape(HTML_SPECIALS, attribute=True).encode("utf-8"): "email_attribute",
}


def header_fields(block: bytes) -> list[bytes]:
    """A header block cut into fields (each with its continuation lines and CRLF)."""
    fields: list[bytes] = []
    for line in block.split(b"\r\n")[:-1]:
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] += line + b"\r\n"
        else:
            fields.append(line + b"\r\n")
    return fields


@dataclass(frozen=True, slots=True)
class Probe:
    """A subscriber whose address and token are marker strings, so that their places
    can be found in the message made for them."""

    personal: RecipientValues
    holes: ProbeMarks

    @classmethod
    def new(cls) -> Probe:
        nonce = secrets.token_hex(8)
        token, email_mark, email_end = f"zqtok{nonce}", f"zqmail{nonce}", f"zqend{nonce}"
        personal = RecipientValues(
            email=email_mark + HTML_SPECIALS + email_end,
            to_name=PROBE_NAME,
            to_address=PROBE_ADDRESS,
            token=token,
            message_id=f"<probe.{nonce}@example.org>",
            date=PROBE_DATE,
        )
        marks = (token, email_mark, email_end, nonce)
        return cls(personal, ProbeMarks(*(m.encode("ascii") for m in marks)))


@dataclass(frozen=True, slots=True)
class ProbeMessage:
    """The simple path's message for the probe, and what it was made from."""

    rendered: RenderedDigest
    footer: bytes  # the text footer as rendered for the probe
    context: dict[str, object]
    message: bytes
    list_unsubscribe: tuple[str, ...]

    @classmethod
    def build(
        cls, renderer: Renderer, content: DigestContent, sender: SenderConfig, links_for: LinksFor, probe: Probe
    ) -> ProbeMessage | None:
        personal = probe.personal
        links, list_unsubscribe = links_for(personal.token)
        context = renderer.context(
            replace(content, subscriber=replace(content.subscriber, email=personal.email)), links
        )
        footer_template = renderer.text_footer_template
        try:
            rendered = renderer.render_context(context)
            footer = footer_template.render(context).encode("utf-8") if footer_template is not None else b""
        except Exception:  # a template that needs more than the context: not ours to splice
            return None
        headers = Headers(
            to_name=personal.to_name,
            to_address=personal.to_address,
            message_id=personal.message_id,
            date=personal.date,
            list_unsubscribe=list_unsubscribe,
        )
        message = message_bytes(build_message(rendered, headers, sender))
        return cls(rendered, footer, context, message, list_unsubscribe)


def header_pieces(head: bytes, probe: Probe, list_unsubscribe: tuple[str, ...]) -> list[Piece]:
    """The header block's fields: the four that differ per subscriber are made for each."""
    token = probe.personal.token
    unsubscribe_value = ", ".join(f"<{uri}>" for uri in list_unsubscribe)
    dynamic: dict[bytes, Callable[[RecipientValues, Links], bytes]] = {
        b"to": lambda p, _: to_line(p.to_name, p.to_address),
        b"date": lambda p, _: date_line(format_datetime(p.date)),
        b"message-id": lambda p, _: plain_line("Message-ID", p.message_id),
        b"list-unsubscribe": lambda p, _: plain_line("List-Unsubscribe", unsubscribe_value.replace(token, p.token)),
    }
    pieces: list[Piece] = []
    for field in header_fields(head):
        make = dynamic.get(field.partition(b":")[0].strip().lower())
        pieces.append(make if make is not None else field)
    return pieces


def joined_constants(pieces: list[Piece]) -> list[Piece]:
    """Adjacent constant bytes joined once, not per message."""
    merged: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


def body_pieces(
    made: ProbeMessage, body: bytes, probe: Probe, renderer: Renderer, footer_substituted: bool
) -> list[Piece] | None:
    """The body cut around the two parts' encoded lines; each part cut at its holes."""
    text = made.rendered.text.encode("utf-8")
    html = made.rendered.html.encode("utf-8")
    # Encoded through the line cache: the constant pieces below are these lines again,
    # and bodies of one day share most of their lines (the same entries).
    text_qp, html_qp = qp_lines(text, cached=True), qp_lines(html, cached=True)
    if body.count(text_qp) != 1 or body.count(html_qp) != 1 or body.find(text_qp) > body.find(html_qp):
        return None
    text_at, html_at = body.find(text_qp), body.find(html_qp)
    if footer_substituted:
        text_part = line_pieces(text, probe.holes, {HTML_SPECIALS.encode("utf-8"): "email_raw"})
    else:
        text_part = text_pieces(text, made.footer, made.context, renderer, probe.holes)
    html_part = line_pieces(html, probe.holes, HTML_FORMS)
    if text_part is None or html_part is None:
        return None
    return [
        body[:text_at],
        *text_part,
        body[text_at + len(text_qp) : html_at],
        *html_part,
        body[html_at + len(html_qp) :],
    ]


def text_pieces(
    text: bytes, footer: bytes, context: dict[str, object], renderer: Renderer, holes: ProbeMarks
) -> list[Piece] | None:
    """Text part: the lines holding the footer are rendered again per subscriber (it
    wraps the address); the others are spliced line by line (their links)."""
    if not footer or text.count(footer) != 1:
        return None
    start = text.find(footer)
    spans = line_spans(text)
    first, last = lines_around(spans, start, start + len(footer))
    line_start, line_end = spans[first][0], spans[last][1]
    head, tail = text[line_start:start], text[start + len(footer) : line_end]
    if holes.marker in head or holes.marker in tail:
        return None
    template = renderer.text_footer_template
    assert template is not None

    def footer_lines(personal: RecipientValues, links: Links) -> bytes:
        rendered = template.render({**context, **personal_context(personal.email, links)})
        return qp_lines(head + rendered.encode("utf-8") + tail, cached=True)

    raw = {HTML_SPECIALS.encode("utf-8"): "email_raw"}
    before = line_pieces(text[:line_start], holes, raw)
    after = line_pieces(text[line_end:], holes, raw)
    if before is None or after is None:
        return None
    return [*before, footer_lines, *after]


def line_pieces(data: bytes, marks: ProbeMarks, forms: dict[bytes, str]) -> list[Piece] | None:
    """A part whose subscriber values are printed as they are: lines without the
    address or token are constant; in the others the values are put back in
    the form their place shows (*forms*: the probe's specials as printed there
    -> which form of the address)."""
    holes: list[tuple[int, int, str]] = []  # start, end, what goes there
    for found in re.finditer(re.escape(marks.email_mark) + b"(.*?)" + re.escape(marks.email_end), data, re.DOTALL):
        if found.group(1) not in forms:
            return None
        holes.append((found.start(), found.end(), forms[found.group(1)]))
    holes += [(m.start(), m.end(), "token") for m in re.finditer(re.escape(marks.token), data)]
    holes.sort()
    marker = marks.marker
    spans = line_spans(data)
    by_line: dict[int, list[tuple[int, int, str]]] = {}
    for hole in holes:
        first, last = lines_around(spans, hole[0], hole[1])
        if first != last:
            return None
        by_line.setdefault(first, []).append(hole)

    pieces: list[Piece] = []
    constant_from = 0
    for number in sorted(by_line):
        line_start, line_end = spans[number]
        pieces.append(qp_lines(data[constant_from:line_start], cached=True))
        segments: list[bytes | str] = []
        at = line_start
        for start, end, what in by_line[number]:
            segments += [data[at:start], what]
            at = end
        segments.append(data[at:line_end])
        if any(isinstance(s, bytes) and marker in s for s in segments):
            return None
        pieces.append(spliced_line(tuple(segments)))
        constant_from = line_end
    pieces.append(qp_lines(data[constant_from:], cached=True))
    return pieces


def probe_pieces(made: ProbeMessage, probe: Probe, renderer: Renderer, footer_substituted: bool) -> list[Piece] | None:
    """The probe's message cut into the pieces a template fills, adjacent constants
    joined; None when a per-subscriber value sits where the splice does not fill it."""
    head_end = made.message.find(b"\r\n\r\n") + 2
    body = body_pieces(made, made.message[head_end:], probe, renderer, footer_substituted)
    if body is None:
        return None
    pieces = joined_constants([*header_pieces(made.message[:head_end], probe, made.list_unsubscribe), *body])
    if any(isinstance(p, bytes) and probe.holes.marker in p for p in pieces):
        return None
    return pieces
