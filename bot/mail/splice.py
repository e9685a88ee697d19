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

from collections.abc import Callable
from dataclasses import dataclass

from bot.config import SenderConfig
from bot.domain import DigestContent
from bot.mail.constant_pool import ChunkPool
from bot.mail.message import SmtpData, dot_stuff, prepared
from bot.mail.personal_slots import (
    TOKEN_CHARACTERS,
    RecipientValues,
    TokenLine,
)
from bot.mail.probe import LinksFor, Piece, Probe, ProbeMessage, probe_pieces
from bot.mail.render import Links, Renderer


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
    made: tuple[tuple[int, Callable[[RecipientValues, Links], bytes]], ...]
    size: int


class MessageTemplate:
    """One digest body's message with holes for one subscriber's values."""

    def __init__(self, pieces: list[Piece], links_for: LinksFor, pool: ChunkPool | None = None) -> None:
        self.links_for = links_for
        self.pool = pool if pool is not None else ChunkPool()
        # Every piece starts and ends on a line boundary, so each can be
        # dot-stuffed for DATA by itself: the constant ones once, here, and
        # kept only in that form, in the pool's chunks (a day's templates are
        # most of the sender's memory).
        self.wire_pieces: list[tuple[bytes, ...] | Callable[[RecipientValues, Links], bytes]] = [
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

    def fill(self, personal: RecipientValues) -> bytes:
        """One subscriber's message (what ``message.build_message`` gives them)."""
        links = self.links_for(personal.token)[0]
        return b"".join(_unstuff(b"".join(p)) if isinstance(p, tuple) else p(personal, links) for p in self.wire_pieces)

    def fill_wire(self, personal: RecipientValues) -> SmtpData:
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
        return SmtpData(tuple(parts), size)

    def _compiled(self, length: int) -> _Laid:
        """The DATA parts of a message whose token has *length* characters, and the size of
        what is the same for every such message: each token line is laid out once for
        that length (its constant bytes dot-stuffed here, the token's slices marked where
        a line starts with one); a token of other characters is made per subscriber."""
        base: list[bytes] = []
        whole: list[int] = []
        cuts: list[tuple[int, int, int, bool]] = []
        made: list[tuple[int, Callable[[RecipientValues, Links], bytes]]] = []
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
        probe = Probe.new()
        made = ProbeMessage.build(renderer, content, sender, links_for, probe)
        if made is None:
            return None
        pieces = probe_pieces(made, probe, renderer, footer_substituted)
        if pieces is None:
            return None  # a per-subscriber value somewhere the splice does not fill
        template = cls(pieces, links_for, pool)
        if template.fill(probe.personal) != made.message or template.fill_wire(probe.personal) != prepared(
            made.message
        ):
            template.release()
            return None
        return template


def _unstuff(lines: bytes) -> bytes:
    """``message.dot_stuff`` undone."""
    return (lines[1:] if lines.startswith(b".") else lines).replace(b"\r\n..", b"\r\n.")
