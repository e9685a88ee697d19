"""Channels stage, each service's markup: outside text (a title, a TL;DR, a why line)
made inert in it, a link written the one way the service reads, and the length its
limit counts.  Pure.

Inert means: no mention (``@everyone``, ``@channel``, ``@room``, ``<!here>``, ``<@id>``)
pings anyone, no address in a title becomes a link of its own, no markup pair opens or
closes around what follows.  The defences are layered, as the services differ: the
markup's own escapes, a zero-width space after every ``@`` and inside every ``://`` and
``www.`` (which no service links or pings through), and the request's own switch where
there is one (Discord's ``allowed_mentions``, Matrix's ``m.mentions``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from bot.domain.channel_states import Service
from bot.domain.text import CONTROL_CHARACTERS, is_web_url

ZWSP = "\u200b"
# Bidi controls and other invisible formatting: a title never reorders what follows it.
_INVISIBLE = re.compile(r"[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_LINKISH = re.compile(r"(?<=:)(?=//)|(?<=www)(?=\.)|(?<=@)", re.IGNORECASE)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:])")
_SLACK_SPECIAL = re.compile(r"([*_~`])")
# What a URL may hold inside a link's markup: the rest percent-encoded (a ")" or ">"
# would end the link early, a "|" split Slack's).
_URL_SAFE = "/:?&=#%@!$,;+~._-*'"


def plain(text: str) -> str:
    """Outside text as one line with nothing that pings or links: control and invisible
    characters gone, a zero-width space after each ``@`` and inside ``://`` and ``www.``."""
    text = CONTROL_CHARACTERS.sub(" ", _INVISIBLE.sub("", text))
    text = " ".join(text.split())
    return _LINKISH.sub(ZWSP, text)


def safe_url(url: str) -> str | None:
    """*url* as a link's target may hold it, or None when it is not an http(s) address."""
    if not is_web_url(url):
        return None
    return quote(url, safe=_URL_SAFE)


@dataclass(frozen=True, slots=True)
class Markup:
    """One service's way of writing text: *escape* makes outside text inert, *link*
    writes a link (its text escaped here), *bold* a heading; *length* what the
    service's limit counts of a finished text."""

    escape: Callable[[str], str]
    link: Callable[[str, str], str]
    bold: Callable[[str], str]
    length: Callable[[str], int]


def utf16_length(text: str) -> int:
    """Characters as Discord, Telegram and Slack count them (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def _markdown_escape(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", plain(text))


def _markdown_link(text: str, url: str) -> str:
    return f"[{_markdown_escape(text)}]({url})"


def _discord_link(text: str, url: str) -> str:
    return f"[{_markdown_escape(text)}](<{url}>)"  # angle brackets: no preview card


def _slack_escape(text: str) -> str:
    escaped = plain(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SLACK_SPECIAL.sub(lambda m: m.group(1) + ZWSP, escaped)


def _slack_link(text: str, url: str) -> str:
    return f"<{url}|{_slack_escape(text).replace('|', '¦')}>"


def _html_escape(text: str) -> str:
    return html.escape(plain(text), quote=False)


def _html_link(text: str, url: str) -> str:
    return f'<a href="{html.escape(url)}">{_html_escape(text)}</a>'


MARKUPS: dict[Service, Markup] = {
    Service.DISCORD: Markup(_markdown_escape, _discord_link, lambda t: f"**{t}**", utf16_length),
    Service.MATTERMOST: Markup(_markdown_escape, _markdown_link, lambda t: f"**{t}**", utf16_length),
    Service.SLACK: Markup(_slack_escape, _slack_link, lambda t: f"*{t}*", utf16_length),
    Service.TELEGRAM: Markup(_html_escape, _html_link, lambda t: f"<b>{t}</b>", utf16_length),
    # Matrix: the HTML body; its plain body is worked out from the same pieces.
    Service.MATRIX: Markup(_html_escape, _html_link, lambda t: f"<b>{t}</b>", lambda t: len(t.encode("utf-8"))),
}
