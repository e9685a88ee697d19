"""Channels stage, where a channel posts: a destination's text (the service's webhook URL
or an Apprise-style URL) read into the one request target each service needs, and the
masked form every listing, log and page shows.  Pure.

A destination is a secret (whoever holds a webhook URL can post to the room): it is
sealed before it is stored (``bot.sealed``), and nothing here puts it into an error
line; ``shown`` names only the service, the host and a fingerprint.  Plain ``http`` is
taken only for a loopback host (a test server, a relay on the same machine): anywhere
else the secret would cross the network in clear.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

from bot.domain.channel_states import Service


class DestinationError(ValueError):
    """A destination that cannot be posted to; ``str()`` is one line without the secret."""


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a channel's parts go.  *url*: the webhook (Slack, Discord, Mattermost), the
    bot's API base ``…/bot<TOKEN>`` (Telegram) or the homeserver (Matrix); *chat*: the
    Telegram chat id or the Matrix room id; *token*: Matrix's access token."""

    service: Service
    url: str = field(repr=False)
    chat: str = ""
    token: str = field(default="", repr=False)


_APPRISE = {
    "slack": Service.SLACK,
    "discord": Service.DISCORD,
    "mmost": Service.MATTERMOST,
    "mmosts": Service.MATTERMOST,
    "tgram": Service.TELEGRAM,
    "matrix": Service.MATRIX,
    "matrixs": Service.MATRIX,
}
_HOSTS = {
    "hooks.slack.com": Service.SLACK,
    "discord.com": Service.DISCORD,
    "discordapp.com": Service.DISCORD,
    "api.telegram.org": Service.TELEGRAM,
}
_PIECE = re.compile(r"[A-Za-z0-9_\-.:]{1,200}")
_CHAT = re.compile(r"-?[0-9]{1,20}|@[A-Za-z0-9_]{4,64}")
_ROOM = re.compile(r"![A-Za-z0-9._=\-/+]{1,200}(:[A-Za-z0-9.\-:\[\]]{1,255})?")  # room version 12: no server part
LONGEST = 2_000


def parse_destination(text: str, service: Service | None = None) -> Destination:
    """The destination *text* names; *service* where a plain URL does not say (a
    self-hosted Mattermost, a test server).  ``DestinationError`` otherwise."""
    text = text.strip()
    if not text or len(text) > LONGEST or not text.isprintable() or " " in text:
        raise DestinationError("not a destination: one URL on one line, without spaces, is expected")
    scheme = text.partition("://")[0].lower()
    if scheme in _APPRISE:
        found = _apprise(scheme, text)
    elif scheme in ("http", "https"):
        found = _web(text, service)
    else:
        raise DestinationError(f"a {scheme or 'schemeless'} URL is not a destination: see docs/channels.md")
    if service is not None and found.service is not service:
        raise DestinationError(f"the destination is a {found.service} one, not {service}")
    return found


def _split(text: str) -> tuple[str, str, int | None, list[str], str]:
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise DestinationError("not a URL digestbot can read") from None
    pieces = [unquote(piece) for piece in parts.path.split("/") if piece]
    return parts.scheme.lower(), (parts.hostname or "").lower(), port, pieces, parts.query


def _web(text: str, service: Service | None) -> Destination:
    scheme, host, port, pieces, query = _split(text)
    if not host:
        raise DestinationError("the URL names no host")
    if scheme == "http" and not _loopback(host):
        raise DestinationError("plain http is taken only for a loopback host: the URL is a secret")
    known = _HOSTS.get(host) or service
    if known is None:
        raise DestinationError(f"{host} is not a service digestbot knows: say which with --service")
    base = f"{scheme}://{_netloc(host, port)}"
    if known is Service.TELEGRAM:
        return _telegram_web(base, pieces, query)
    if known is Service.MATRIX:
        raise DestinationError("a Matrix destination is matrixs://<ACCESS_TOKEN>@<homeserver>/<!room:server>")
    if not pieces:
        raise DestinationError("the URL has no webhook path")
    return Destination(known, f"{base}/" + "/".join(quote(piece, safe="") for piece in pieces))


def _telegram_web(base: str, pieces: list[str], query: str) -> Destination:
    chat = unquote(dict(p.partition("=")[::2] for p in query.split("&") if p).get("chat_id", ""))
    bot = [p for p in pieces if p.startswith("bot")]
    if not bot or not _CHAT.fullmatch(chat):
        raise DestinationError("a Telegram destination is https://api.telegram.org/bot<TOKEN>?chat_id=<CHAT>")
    return _telegram(base + "/" + "/".join(pieces[: pieces.index(bot[0]) + 1]), chat)


def _apprise(scheme: str, text: str) -> Destination:
    service = _APPRISE[scheme]
    if service is Service.TELEGRAM:  # a bot token holds a colon: it is no host and port
        token, _, chat = text.partition("://")[2].partition("/")
        if not _PIECE.fullmatch(token) or not _CHAT.fullmatch(unquote(chat)):
            raise DestinationError("a Telegram destination is tgram://<BOT_TOKEN>/<CHAT_ID>")
        return _telegram(f"https://api.telegram.org/bot{token}", unquote(chat))
    _, host, port, pieces, _query = _split(text)
    if service in (Service.SLACK, Service.DISCORD):
        return _hosted(service, [urlsplit(text).netloc, *pieces])  # the first token's case kept
    tls = scheme.endswith("s")
    if not host or (not tls and not _loopback(host)):
        raise DestinationError(f"{scheme}:// needs a host, and plain http only on a loopback host")
    base = f"{'https' if tls else 'http'}://{_netloc(host, port)}"
    if service is Service.MATTERMOST:
        if not pieces or not _PIECE.fullmatch(pieces[-1]):
            raise DestinationError("a Mattermost destination is mmosts://<host>/<WEBHOOK_KEY>")
        prefix = "".join(f"/{quote(p, safe='')}" for p in pieces[:-1])
        return Destination(service, f"{base}{prefix}/hooks/{pieces[-1]}")
    return _matrix(base, unquote(urlsplit(text).username or ""), pieces)


def _matrix(base: str, token: str, pieces: list[str]) -> Destination:
    if not token or not _PIECE.fullmatch(token) or len(pieces) != 1 or not _ROOM.fullmatch(pieces[0]):
        raise DestinationError("a Matrix destination is matrixs://<ACCESS_TOKEN>@<homeserver>/<!room:server>")
    return Destination(Service.MATRIX, base, chat=pieces[0], token=token)


_HOSTED = {
    Service.SLACK: (3, "https://hooks.slack.com/services/", "slack://<A>/<B>/<C> (the webhook's three tokens)"),
    Service.DISCORD: (2, "https://discord.com/api/webhooks/", "discord://<WEBHOOK_ID>/<WEBHOOK_TOKEN>"),
}


def _hosted(service: Service, tokens: list[str]) -> Destination:
    count, base, form = _HOSTED[service]
    if len(tokens) != count or not all(_PIECE.fullmatch(t) for t in tokens):
        raise DestinationError(f"a {service.value.title()} destination is {form}")
    return Destination(service, base + "/".join(tokens))


def _telegram(base: str, chat: str) -> Destination:
    return Destination(Service.TELEGRAM, base, chat=chat)


def _netloc(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port else shown


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def shown(text: str, destination: Destination) -> str:
    """What a listing shows of a destination: its service, host and a fingerprint of
    the whole text (two destinations told apart without either shown)."""
    host = urlsplit(destination.url).hostname or "?"
    fingerprint = hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:8]
    room = f" {destination.chat}" if destination.service is Service.MATRIX else ""
    return f"{destination.service} at {host}{room} (#{fingerprint})"
