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

from bot.config import SenderConfig
from bot.domain import DigestContent, RenderedDigest
from bot.mail.chunks import ChunkPool
from bot.mail.holes import (
    TOKEN_CHARACTERS,
    Personal,
    TokenLine,
    line_spans,
    lines_around,
    spliced_line,
)
from bot.mail.lines import date_line, html_escape, plain_line, to_line
from bot.mail.message import Headers, Prepared, build_message, dot_stuff, message_bytes, prepared
from bot.mail.qp import qp_lines
from bot.mail.render import Links, Renderer, personal_context

LinksFor = Callable[[str], tuple[Links, tuple[str, ...]]]  # token -> (footer links, List-Unsubscribe URIs)

# Escaped differently in HTML text and attributes: the probe address carries
# them so that its serialized form shows which escaping each place uses.
_HTML_SPECIALS = "&\"<>'\u00a0"
_PROBE_DATE = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)
_PROBE_NAME = "Probe Reader"
_PROBE_ADDRESS = "probe@example.org"


Piece = bytes | Callable[[Personal, Links], bytes]


@dataclass(frozen=True, slots=True)
class _Laid:
    """A message's DATA parts for tokens of one length: *base* with an empty slot
    wherever the subscriber's values go.  *whole*: slots that take the whole token;
    *cuts*: (slot, start, end, begins a line) for token[start:end] (a leading dot is
    doubled where it begins a line); *made*: (slot, piece) for what is made per
    subscriber; *size*: the bytes that are the same in every such message."""

    base: list[bytes]
    whole: tuple[int, ...]
    cuts: tuple[tuple[int, int, int, bool], ...]
    made: tuple[tuple[int, Callable[[Personal, Links], bytes]], ...]
    size: int


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


def _header_fields(block: bytes) -> list[bytes]:
    """A header block cut into fields (each with its continuation lines and CRLF)."""
    fields: list[bytes] = []
    for line in block.split(b"\r\n")[:-1]:
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] += line + b"\r\n"
        else:
            fields.append(line + b"\r\n")
    return fields


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
        message = message_bytes(build_message(rendered, headers, sender))
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
        # token length -> the DATA parts with the token lines laid out (``_compiled``)
        self.compiled: dict[int, _Laid] = {}

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
        a pass over the whole message: the constant chunks as they are, the token lines
        from their layouts (``TokenLine``), and only the rest made for the subscriber."""
        links = self.links_for(personal.token)[0]
        token = personal.token.encode("ascii")
        if not TOKEN_CHARACTERS.issuperset(token):  # never a token we make: each piece made for it
            whole = prepared(self.fill(personal))
            if whole is None:
                raise ValueError("a spliced message without CRLF line ends")
            return whole
        laid = self.compiled.get(len(token))
        if laid is None:
            laid = self.compiled[len(token)] = self._compiled(len(token))
        parts = laid.base.copy()
        for slot in laid.whole:
            parts[slot] = token
        for slot, start, end, line_start in laid.cuts:
            piece = token[start:end]
            parts[slot] = b"." + piece if line_start and piece[:1] == b"." else piece
        size = laid.size
        for slot, make in laid.made:
            made = make(personal, links)
            size += len(made)
            parts[slot] = dot_stuff(made)
        parts.append(b".\r\n")
        return Prepared(tuple(parts), size)

    def _compiled(self, length: int) -> _Laid:
        """The DATA parts of a message whose token has *length* characters, and the size of
        what is the same for every such message: each token line is laid out once for
        that length (its constant bytes dot-stuffed here, the token's slices marked where
        a line starts with one); a token of other characters is made per subscriber."""
        base: list[bytes] = []
        whole: list[int] = []
        cuts: list[tuple[int, int, int, bool]] = []
        made: list[tuple[int, Callable[[Personal, Links], bytes]]] = []
        size = self.constant_size
        for piece in self.wire_pieces:
            if isinstance(piece, tuple):
                base += piece
                continue
            layout = piece.layout(length) if isinstance(piece, TokenLine) else None
            if layout is None:
                made.append((len(base), piece))
                base.append(b"")
                continue
            at_line_start = True
            for constant, start, end in layout:
                if constant:
                    stuffed = constant.replace(b"\r\n.", b"\r\n..")
                    base.append(b"." + stuffed if at_line_start and stuffed[:1] == b"." else stuffed)
                    size += len(constant)
                    at_line_start = constant.endswith(b"\r\n")
                if end > start:
                    if start == 0 and end == length and not at_line_start:
                        whole.append(len(base))
                    else:
                        cuts.append((len(base), start, end, at_line_start))
                    base.append(b"")
                    size += end - start
                    at_line_start = False
        return _Laid(base, tuple(whole), tuple(cuts), tuple(made), size)

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
        # Encoded through the line cache: the constant pieces below are these lines again,
        # and bodies of one day share most of their lines (the same entries).
        text_qp, html_qp = qp_lines(text, cached=True), qp_lines(html, cached=True)
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
        spans = line_spans(text)
        first, last = lines_around(spans, start, start + len(footer))
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


def _unstuff(lines: bytes) -> bytes:
    """``message.dot_stuff`` undone."""
    return (lines[1:] if lines.startswith(b".") else lines).replace(b"\r\n..", b"\r\n.")
