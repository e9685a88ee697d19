"""Channels stage, a digest shaped for chat: its top entries (title as a link, the TL;DR
where one exists, the one-line why) and the link to its web version, cut into numbered
parts within each service's limits, never inside a link or a markup pair.  Pure.

A part is whole blocks: the heading, one block an entry, the closing line.  An entry
that cannot fit a part even alone is shown shorter (its texts cut, then its title
without the link); what the parts cannot hold is "N more on the web".
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.channels.markup import MARKUPS, Markup, plain, safe_url
from bot.domain.channel_states import Service


@dataclass(frozen=True, slots=True)
class ChatEntry:
    title: str
    url: str
    tldr: str = ""
    why: str = ""


@dataclass(frozen=True, slots=True)
class ChatDigest:
    """What a channel's digest says, as plain outside text: the markup comes later."""

    heading: str  # "5 new entries: llm, gpu (2026-12-07)"
    entries: tuple[ChatEntry, ...]
    web_url: str = ""  # the web version; "" when the site has no public URL
    pending: int = 0  # matching entries left for the next digest


@dataclass(frozen=True, slots=True)
class Limits:
    """A service's limits, as its ``Markup.length`` counts: *message* a whole part,
    *block* one block (Slack's sections), *blocks* how many a part may hold."""

    message: int
    block: int
    blocks: int


LIMITS: dict[Service, Limits] = {
    Service.DISCORD: Limits(2_000, 2_000, 10_000),
    Service.TELEGRAM: Limits(4_096, 4_096, 10_000),
    Service.SLACK: Limits(40_000, 3_000, 50),
    Service.MATTERMOST: Limits(16_383, 16_383, 10_000),
    # A Matrix event is at most 65,536 bytes; its plain body and its HTML both travel.
    Service.MATRIX: Limits(24_000, 24_000, 10_000),
}
NUMBERING = " \\(99\\/99\\)"  # room kept in the heading for a part's number, as escaped
MOST_PARTS = 4  # a digest is never more than this many messages in a room
_CUTS = ((300, 400, 200), (120, 160, 80), (60, 0, 0))  # title, TL;DR, why: ever shorter


def parts_of(digest: ChatDigest, service: Service, most_parts: int = MOST_PARTS) -> list[list[str]]:
    """The parts a channel of *service* is posted, each a list of blocks in its markup."""
    markup, limits = MARKUPS[service], LIMITS[service]
    entries = [_entry_block(entry, markup, limits) for entry in digest.entries]
    shown = len(entries)
    while True:
        more = len(entries) - shown + digest.pending
        parts = _pack(_heading(digest, markup), entries[:shown], _closing(digest, more, markup), markup, limits)
        if len(parts) <= most_parts or shown == 0:
            return _numbered(parts, markup)
        shown -= 1


def _entry_block(entry: ChatEntry, markup: Markup, limits: Limits) -> str:
    room = min(limits.block, limits.message) - markup.length(NUMBERING) - 200
    for title_cut, tldr_cut, why_cut in _CUTS:
        block = _entry(entry, markup, title_cut, tldr_cut, why_cut, linked=True)
        if markup.length(block) <= room:
            return block
    return _entry(entry, markup, 60, 0, 0, linked=False)


def _entry(entry: ChatEntry, markup: Markup, title_cut: int, tldr_cut: int, why_cut: int, *, linked: bool) -> str:
    title = _cut(plain(entry.title) or "(untitled)", title_cut)
    url = safe_url(entry.url) if linked else None
    lines = [markup.link(title, url) if url and len(url) <= 1_000 else markup.escape(title)]
    if entry.tldr and tldr_cut:
        lines.append(markup.escape(_cut("TL;DR: " + plain(entry.tldr), tldr_cut)))
    if entry.why and why_cut:
        lines.append(markup.escape(_cut(plain(entry.why), why_cut)))
    return "\n".join(lines)


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: max(most - 1, 0)].rstrip() + "…"


def _heading(digest: ChatDigest, markup: Markup) -> str:
    return markup.bold(markup.escape(_cut(plain(digest.heading), 200)))


def _closing(digest: ChatDigest, more: int, markup: Markup) -> str:
    url = safe_url(digest.web_url)
    if more and url:
        return markup.link(f"{more} more on the web", url)
    if more:
        return markup.escape(f"{more} more in the next digest")
    return markup.link("Read it on the web", url) if url else ""


def _pack(heading: str, entries: list[str], closing: str, markup: Markup, limits: Limits) -> list[list[str]]:
    """Blocks into parts: each part opens with the heading, the last closes with the
    closing line; a part never exceeds the message, block or block-count limit."""
    reserve = markup.length(NUMBERING)
    parts: list[list[str]] = [[heading]]
    for block in [*entries, *([closing] if closing else [])]:
        current = parts[-1]
        fits = (
            len(current) < limits.blocks
            and _length(current, markup) + 2 + markup.length(block) + reserve <= limits.message
        )
        if not fits and len(current) > 1:
            parts.append([heading])
        parts[-1].append(block)
    return parts


def _length(blocks: list[str], markup: Markup) -> int:
    return markup.length("\n\n".join(blocks))


def _numbered(parts: list[list[str]], markup: Markup) -> list[list[str]]:
    if len(parts) == 1:
        return parts
    return [[part[0] + markup.escape(f" ({n}/{len(parts)})"), *part[1:]] for n, part in enumerate(parts, 1)]
