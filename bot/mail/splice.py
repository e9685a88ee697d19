"""Message stage, fast path: many subscribers' messages from one digest body.

``message.build_message`` makes a message from scratch: render the whole
digest, build an ``EmailMessage``, serialize it and quoted-printable-encode
the whole body, for every message.  Subscribers with one filter usually get the
same entries on the same day, and their messages then differ in a few places
only: the To, Date, Message-ID and List-Unsubscribe header lines and, in the
footer, their address and their signed token.  A ``MessageTemplate`` is made
once per digest body by building the simple path's message for a *probe*
subscriber whose address and token are marker strings and cutting those
bytes at the markers; ``fill`` then makes one subscriber's message by
encoding only the lines that hold their values (quoted-printable encodes a
line by itself, so every other line is encoded once).

The bytes are the simple path's, and that is checked where it could fail:
the templates may only print a subscriber's values (checked on their syntax
tree; a text footer that wraps or filters them is rendered again for each
subscriber instead), every marker must sit where the splice reproduces it
(plain text, HTML text or an HTML attribute whose escaping is recognised),
and filling the template with the probe's own values must give back the
probe's message byte for byte.  A template
that fails a check is not made (``build`` returns None) and the caller uses
the simple path.  Never reads the store, never sends.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import format_datetime

from jinja2 import nodes

from bot.config import SenderConfig
from bot.domain import DigestContent, RenderedDigest
from bot.mail.chunks import ChunkPool
from bot.mail.lines import date_line, html_escape, plain_line, qp_lines, to_line
from bot.mail.message import Headers, Prepared, build_message, dot_stuff, prepared
from bot.mail.render import TEXT_FOOTER, Links, Renderer, personal_context

LinksFor = Callable[[str], tuple[Links, tuple[str, ...]]]  # token -> (footer links, List-Unsubscribe URIs)

# Escaped differently in HTML text and attributes: the probe address carries
# them so that its serialized form shows which escaping each place uses.
_HTML_SPECIALS = "&\"<>'\u00a0"
_PROBE_DATE = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)
_PROBE_NAME = "Probe Reader"
_PROBE_ADDRESS = "probe@example.org"


@dataclass(frozen=True, slots=True)
class Personal:
    """One subscriber's values in one message."""

    email: str  # as stored, shown in the footer
    to_name: str
    to_address: str  # the envelope form (``message.envelope_address``)
    token: str  # signed, from ``bot.tokens``: [0-9A-Za-z._-] only
    message_id: str
    date: datetime


Piece = bytes | Callable[[Personal, Links], bytes]


@dataclass(frozen=True, slots=True)
class _Holes:
    """The probe's marker strings: its token, the address between two marks, and
    the nonce none of the constant bytes may still contain."""

    token: bytes
    email_mark: bytes
    email_end: bytes
    marker: bytes


# How HTML prints the probe's specials in text and in attributes.
_HTML_FORMS = {
    html_escape(_HTML_SPECIALS, attribute=False).encode("utf-8"): "email_text",
    html_escape(_HTML_SPECIALS, attribute=True).encode("utf-8"): "email_attribute",
}


def templates_allow_splicing(renderer: Renderer) -> bool:
    """True when no digest template but the text footer does more with a
    subscriber's own values than print them (``{{ subscriber_email }}``) or test
    whether there is a manage link (``{% if manage_url %}``, the same for every
    subscriber).  A template that branches on them, filters or joins them could
    differ between subscribers where the probe cannot show it: such a template
    set is always rendered in full.  Checked on the templates' syntax tree."""
    names = renderer.env.list_templates(
        filter_func=lambda name: name.endswith(".j2") and name != TEXT_FOOTER and not name.startswith("web/")
    )
    return _print_values_only(renderer, names)


def footer_allows_substitution(renderer: Renderer) -> bool:
    """True when the text footer, too, only prints a subscriber's values: then
    its lines are spliced like the HTML part's instead of rendering the footer
    again for every subscriber (which it needs when it wraps or filters them)."""
    return _print_values_only(renderer, [TEXT_FOOTER])


def _print_values_only(renderer: Renderer, names: list[str]) -> bool:
    personal = set(personal_context("", Links("", None)))
    env = renderer.env
    # Blocks whose output is captured or transformed before it is written.
    capturing = (nodes.FilterBlock, nodes.AssignBlock, nodes.Macro, nodes.CallBlock)

    def fine(node: nodes.Node, captured: bool) -> bool:
        captured = captured or isinstance(node, capturing)
        for child in node.iter_child_nodes():
            if isinstance(child, nodes.Name) and child.name in personal:
                printed = isinstance(node, nodes.Output) and not captured
                # Whether there are web links is the configuration's, the same for everyone.
                tested = isinstance(node, nodes.If) and node.test is child and child.name in ("manage_url", "web_url")
                if not (printed or tested):
                    return False
            if isinstance(child, nodes.Include) and not isinstance(child.template, nodes.Const):
                return False  # which template it includes depends on data
            if not fine(child, captured):
                return False
        return True

    try:
        loader = env.loader
        if loader is None:
            return False
        return all(fine(env.parse(loader.get_source(env, name)[0]), False) for name in names)
    except Exception:  # unreadable or invalid: the renderer will say so; do not splice
        return False


def _header_fields(block: bytes) -> list[bytes]:
    """A header block cut into fields (each with its continuation lines and CRLF)."""
    fields: list[bytes] = []
    for line in block.split(b"\r\n")[:-1]:
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] += line + b"\r\n"
        else:
            fields.append(line + b"\r\n")
    return fields


def _line_spans(data: bytes) -> list[tuple[int, int]]:
    spans, offset = [], 0
    for line in data.splitlines(keepends=True):
        spans.append((offset, offset + len(line)))
        offset += len(line)
    return spans


def _lines_around(spans: list[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """Indexes of the first and last line that [start, end) touches."""
    first = next(n for n, (a, b) in enumerate(spans) if a <= start < b)
    last = next(n for n, (a, b) in enumerate(spans) if a < end <= b)
    return first, last


@dataclass(frozen=True, slots=True)
class _Probe:
    """A subscriber whose address and token are marker strings, so that their places
    can be found in the message made for them."""

    personal: Personal
    holes: _Holes

    @classmethod
    def new(cls) -> _Probe:
        nonce = secrets.token_hex(8)
        token, email_mark, email_end = f"zqtok{nonce}", f"zqmail{nonce}", f"zqend{nonce}"
        personal = Personal(
            email=email_mark + _HTML_SPECIALS + email_end,
            to_name=_PROBE_NAME,
            to_address=_PROBE_ADDRESS,
            token=token,
            message_id=f"<probe.{nonce}@example.org>",
            date=_PROBE_DATE,
        )
        marks = (token, email_mark, email_end, nonce)
        return cls(personal, _Holes(*(m.encode("ascii") for m in marks)))


@dataclass(frozen=True, slots=True)
class _ProbeMessage:
    """The simple path's message for the probe, and what it was made from."""

    rendered: RenderedDigest
    footer: bytes  # the text footer as rendered for the probe
    context: dict[str, object]
    message: bytes
    list_unsubscribe: tuple[str, ...]

    @classmethod
    def build(
        cls, renderer: Renderer, content: DigestContent, sender: SenderConfig, links_for: LinksFor, probe: _Probe
    ) -> _ProbeMessage | None:
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
        message = build_message(rendered, headers, sender).as_bytes()
        return cls(rendered, footer, context, message, list_unsubscribe)


def _header_pieces(head: bytes, probe: _Probe, list_unsubscribe: tuple[str, ...]) -> list[Piece]:
    """The header block's fields: the four that differ per subscriber are made for each."""
    token = probe.personal.token
    unsubscribe_value = ", ".join(f"<{uri}>" for uri in list_unsubscribe)
    dynamic: dict[bytes, Callable[[Personal, Links], bytes]] = {
        b"to": lambda p, _: to_line(p.to_name, p.to_address),
        b"date": lambda p, _: date_line(format_datetime(p.date)),
        b"message-id": lambda p, _: plain_line("Message-ID", p.message_id),
        b"list-unsubscribe": lambda p, _: plain_line("List-Unsubscribe", unsubscribe_value.replace(token, p.token)),
    }
    pieces: list[Piece] = []
    for field in _header_fields(head):
        make = dynamic.get(field.partition(b":")[0].strip().lower())
        pieces.append(make if make is not None else field)
    return pieces


def _joined_constants(pieces: list[Piece]) -> list[Piece]:
    """Adjacent constant bytes joined once, not per message."""
    merged: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


class MessageTemplate:
    """One digest body's message with holes for one subscriber's values."""

    def __init__(self, pieces: list[Piece], links_for: LinksFor, pool: ChunkPool | None = None) -> None:
        self.links_for = links_for
        self.pool = pool if pool is not None else ChunkPool()
        # Every piece starts and ends on a line boundary, so each can be
        # dot-stuffed for DATA by itself: the constant ones once, here, and
        # kept only in that form, in the pool's chunks (a day's templates are
        # most of the sender's memory).
        self.wire_pieces: list[tuple[bytes, ...] | Callable[[Personal, Links], bytes]] = [
            self.pool.intern(dot_stuff(p)) if isinstance(p, bytes) else p for p in pieces
        ]
        self.constant_size = sum(len(p) for p in pieces if isinstance(p, bytes))
        self.released = False

    def release(self) -> None:
        """Tell the pool this template no longer counts (dropped from a cache).  It
        still works for whoever holds it: its chunks live as long as it does."""
        if not self.released:
            self.released = True
            for piece in self.wire_pieces:
                if isinstance(piece, tuple):
                    self.pool.release(piece)

    def fill(self, personal: Personal) -> bytes:
        """One subscriber's message (what ``message.build_message`` gives them)."""
        links = self.links_for(personal.token)[0]
        return b"".join(_unstuff(b"".join(p)) if isinstance(p, tuple) else p(personal, links) for p in self.wire_pieces)

    def fill_wire(self, personal: Personal) -> Prepared:
        """``fill`` as DATA carries it (``message.prepared(fill(personal))``), without
        a pass over the whole message."""
        links = self.links_for(personal.token)[0]
        size = self.constant_size
        parts: list[bytes] = []
        for piece in self.wire_pieces:
            if isinstance(piece, tuple):
                parts += piece
            else:
                made = piece(personal, links)
                size += len(made)
                parts.append(dot_stuff(made))
        parts.append(b".\r\n")
        return Prepared(tuple(parts), size)

    @classmethod
    def build(
        cls,
        renderer: Renderer,
        content: DigestContent,
        sender: SenderConfig,
        links_for: LinksFor,
        *,
        footer_substituted: bool = False,
        pool: ChunkPool | None = None,
    ) -> MessageTemplate | None:
        """The template for *content*'s body, or None where the splice could not
        reproduce the simple path exactly (then build each message in full).
        *footer_substituted*: ``footer_allows_substitution`` holds for *renderer*;
        *pool*: where its constant bytes are kept (shared with other templates)."""
        if content.resend_of is not None or renderer.text_footer_template is None:
            return None
        probe = _Probe.new()
        made = _ProbeMessage.build(renderer, content, sender, links_for, probe)
        if made is None:
            return None
        head_end = made.message.find(b"\r\n\r\n") + 2
        body = cls._body_pieces(made, made.message[head_end:], probe, renderer, footer_substituted)
        if body is None:
            return None
        pieces = _joined_constants([*_header_pieces(made.message[:head_end], probe, made.list_unsubscribe), *body])
        if any(isinstance(p, bytes) and probe.holes.marker in p for p in pieces):
            return None  # a per-subscriber value somewhere the splice does not fill
        template = cls(pieces, links_for, pool)
        if template.fill(probe.personal) != made.message or template.fill_wire(probe.personal) != prepared(
            made.message
        ):
            template.release()
            return None
        return template

    @classmethod
    def _body_pieces(
        cls, made: _ProbeMessage, body: bytes, probe: _Probe, renderer: Renderer, footer_substituted: bool
    ) -> list[Piece] | None:
        """The body cut around the two parts' encoded lines; each part cut at its holes."""
        text = made.rendered.text.encode("utf-8")
        html = made.rendered.html.encode("utf-8")
        text_qp, html_qp = qp_lines(text), qp_lines(html)
        if body.count(text_qp) != 1 or body.count(html_qp) != 1 or body.find(text_qp) > body.find(html_qp):
            return None
        text_at, html_at = body.find(text_qp), body.find(html_qp)
        if footer_substituted:
            text_pieces = cls._line_pieces(text, probe.holes, {_HTML_SPECIALS.encode("utf-8"): "email_raw"})
        else:
            text_pieces = cls._text_pieces(text, made.footer, made.context, renderer, probe.holes)
        html_pieces = cls._line_pieces(html, probe.holes, _HTML_FORMS)
        if text_pieces is None or html_pieces is None:
            return None
        return [
            body[:text_at],
            *text_pieces,
            body[text_at + len(text_qp) : html_at],
            *html_pieces,
            body[html_at + len(html_qp) :],
        ]

    @staticmethod
    def _text_pieces(
        text: bytes, footer: bytes, context: dict[str, object], renderer: Renderer, holes: _Holes
    ) -> list[Piece] | None:
        """Text part: the lines holding the footer are rendered again per subscriber (it
        wraps the address); the others are spliced line by line (their links)."""
        if not footer or text.count(footer) != 1:
            return None
        start = text.find(footer)
        spans = _line_spans(text)
        first, last = _lines_around(spans, start, start + len(footer))
        line_start, line_end = spans[first][0], spans[last][1]
        head, tail = text[line_start:start], text[start + len(footer) : line_end]
        if holes.marker in head or holes.marker in tail:
            return None
        template = renderer.text_footer_template
        assert template is not None

        def footer_lines(personal: Personal, links: Links) -> bytes:
            rendered = template.render({**context, **personal_context(personal.email, links)})
            return qp_lines(head + rendered.encode("utf-8") + tail, cached=True)

        raw = {_HTML_SPECIALS.encode("utf-8"): "email_raw"}
        before = MessageTemplate._line_pieces(text[:line_start], holes, raw)
        after = MessageTemplate._line_pieces(text[line_end:], holes, raw)
        if before is None or after is None:
            return None
        return [*before, footer_lines, *after]

    @staticmethod
    def _line_pieces(data: bytes, marks: _Holes, forms: dict[bytes, str]) -> list[Piece] | None:
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
        spans = _line_spans(data)
        by_line: dict[int, list[tuple[int, int, str]]] = {}
        for hole in holes:
            first, last = _lines_around(spans, hole[0], hole[1])
            if first != last:
                return None
            by_line.setdefault(first, []).append(hole)

        pieces: list[Piece] = []
        constant_from = 0
        for number in sorted(by_line):
            line_start, line_end = spans[number]
            pieces.append(qp_lines(data[constant_from:line_start]))
            segments: list[bytes | str] = []
            at = line_start
            for start, end, what in by_line[number]:
                segments += [data[at:start], what]
                at = end
            segments.append(data[at:line_end])
            if any(isinstance(s, bytes) and marker in s for s in segments):
                return None
            pieces.append(_spliced_line(tuple(segments)))
            constant_from = line_end
        pieces.append(qp_lines(data[constant_from:]))
        return pieces


def _unstuff(lines: bytes) -> bytes:
    """``message.dot_stuff`` undone."""
    return (lines[1:] if lines.startswith(b".") else lines).replace(b"\r\n..", b"\r\n.")


# A hole's kind -> the subscriber's value as that place prints it.
_HOLE_VALUES: dict[str, Callable[[Personal], bytes]] = {
    "email_raw": lambda p: p.email.encode("utf-8"),
    "email_text": lambda p: html_escape(p.email, attribute=False).encode("utf-8"),
    "email_attribute": lambda p: html_escape(p.email, attribute=True).encode("utf-8"),
    "token": lambda p: p.token.encode("ascii"),
}


def _spliced_line(segments: tuple[bytes | str, ...]) -> Callable[[Personal, Links], bytes]:
    def line(personal: Personal, _links: Links) -> bytes:
        return qp_lines(b"".join(s if isinstance(s, bytes) else _HOLE_VALUES[s](personal) for s in segments))

    return line
