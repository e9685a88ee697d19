"""Message stage, fast path: the places a subscriber's own values go.

What ``splice`` needs to know about one hole: the subscriber's values (``RecipientValues``),
whether the templates only print them (checked on their syntax tree), and how a
line holding a token is encoded once per token length and filled per subscriber.
Never renders a digest, never reads the store, never sends.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from jinja2 import nodes

from bot.mail.header_lines import html_escape
from bot.mail.qp import qp_lines
from bot.mail.render import TEXT_FOOTER, Links, Renderer, personal_context
from bot.mail.templates import digest_environment


@dataclass(frozen=True, slots=True)
class RecipientValues:
    """One subscriber's values in one message."""

    email: str  # as stored, shown in the footer
    to_name: str
    to_address: str  # the envelope form (``message.envelope_address``)
    token: str  # signed, from ``bot.tokens``: [0-9A-Za-z._-] only
    message_id: str
    date: datetime


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
    loader = renderer.env.loader
    if loader is None:
        return False
    try:
        return all(_source_prints_values_only(loader.get_source(renderer.env, name)[0]) for name in names)
    except Exception:  # unreadable or invalid: the renderer will say so; do not splice
        return False


_SYNTAX = digest_environment()


@lru_cache(maxsize=64)
def _source_prints_values_only(source: str) -> bool:
    """Whether one template's source only prints a subscriber's values (once per source in
    a process: a mailer is made per command and per test, the templates stay the same)."""
    personal = set(personal_context("", Links("", None)))
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

    return fine(_SYNTAX.parse(source), False)


def line_spans(data: bytes) -> list[tuple[int, int]]:
    spans, offset = [], 0
    for line in data.splitlines(keepends=True):
        spans.append((offset, offset + len(line)))
        offset += len(line)
    return spans


def lines_around(spans: list[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """Indexes of the first and last line that [start, end) touches (a binary search:
    a body has thousands of lines and a hundred holes)."""
    first = bisect.bisect_right(spans, (start, sys.maxsize)) - 1
    last = bisect.bisect_left(spans, (end, -1), key=lambda span: (span[1], span[0]))
    return first, last


# A hole's kind -> the subscriber's value as that place prints it.
HOLE_VALUES: dict[str, Callable[[RecipientValues], bytes]] = {
    "email_raw": lambda p: p.email.encode("utf-8"),
    "email_text": lambda p: html_escape(p.email, attribute=False).encode("utf-8"),
    "email_attribute": lambda p: html_escape(p.email, attribute=True).encode("utf-8"),
    "token": lambda p: p.token.encode("ascii"),
}


def spliced_line(segments: tuple[bytes | str, ...]) -> Callable[[RecipientValues, Links], bytes]:
    if all(isinstance(s, bytes) or s == "token" for s in segments):
        return TokenLine(segments)

    def line(personal: RecipientValues, _links: Links) -> bytes:
        return qp_lines(b"".join(s if isinstance(s, bytes) else HOLE_VALUES[s](personal) for s in segments))

    return line


# Any token character is a byte of its own in quoted-printable: two lines that differ
# only in them are laid out alike, soft line breaks and all.
TOKEN_CHARACTERS = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz._-")
# Characters quoted-printable writes as they are and tokens never hold: one absent from a
# line stands in for its tokens, and where it appears in the encoding the tokens go.
_STAND_INS = b"~|^`"


class TokenLine:
    """A line whose only holes are the subscriber's token (a link): encoded once per
    token length with a stand-in character in the token's place, then filled by putting
    the token's characters where the stand-ins came out, instead of encoding the line
    for every subscriber (a message has a hundred such lines, and encoding them was
    most of what a message cost)."""

    def __init__(self, segments: tuple[bytes | str, ...]) -> None:
        self.segments = segments
        self.holes = sum(1 for s in segments if s == "token")
        raw = b"".join(s for s in segments if isinstance(s, bytes))
        self.stand_in = next((c for c in _STAND_INS if c not in raw), None)
        # token length -> (constant bytes, then (start, end) of the token's characters, ...), or None: encode
        self.layouts: dict[int, tuple[tuple[bytes, int, int], ...] | None] = {}

    def _encoded(self, token: bytes) -> bytes:
        return _encoded(self.segments, token)

    def layout(self, length: int) -> tuple[tuple[bytes, int, int], ...] | None:
        """This line's layout for tokens of *length* characters (None: encode each)."""
        if length not in self.layouts:
            self.layouts[length] = _layout(self.segments, self.stand_in, self.holes, length)
        return self.layouts[length]

    def __call__(self, personal: RecipientValues, _links: Links) -> bytes:
        token = personal.token.encode("ascii")
        layout = self.layout(len(token)) if TOKEN_CHARACTERS.issuperset(token) else None
        return self._encoded(token) if layout is None else _filled(layout, token)


def _encoded(segments: tuple[bytes | str, ...], token: bytes) -> bytes:
    return qp_lines(b"".join(token if s == "token" else s for s in segments))  # type: ignore[misc]


# Shared by every template of a day: the rating and footer lines of one entry or one
# reader's link come back in many digest bodies.
@lru_cache(maxsize=16384)
def _layout(
    segments: tuple[bytes | str, ...], stand_in: int | None, holes: int, length: int
) -> tuple[tuple[bytes, int, int], ...] | None:
    if stand_in is None:
        return None
    encoded = _encoded(segments, bytes([stand_in]) * length)
    at, position = [], encoded.find(stand_in)
    while position >= 0:
        at.append(position)
        position = encoded.find(stand_in, position + 1)
    if len(at) != length * holes:
        return None
    runs: list[tuple[bytes, int, int]] = []
    done = 0  # bytes of the encoding placed so far
    for k, position in enumerate(at):
        char = k % length
        if runs and position == done and char != 0:
            constant, start, _ = runs[-1]
            runs[-1] = (constant, start, char + 1)
        else:
            runs.append((encoded[done:position], char, char + 1))
        done = position + 1
    return (*runs, (encoded[done:], 0, 0))


def _filled(layout: tuple[tuple[bytes, int, int], ...], token: bytes) -> bytes:
    return b"".join([part for constant, start, end in layout for part in (constant, token[start:end])])
