"""Channels stage, each service's request and what its answer means.  Pure: the request
one part becomes (method, URL, headers, JSON body) and the verdict on an answer, or on
a request that got none; ``bot.channels.posting`` sends it.

What an answer means, the same for every part of every channel (``PostVerdict``):

* 2xx: posted.
* 429: not posted; wait what ``Retry-After`` (or Discord's ``retry_after``, Telegram's
  ``parameters.retry_after``, Matrix's ``retry_after_ms``) says, for this destination.
* 502, 503, 504: the service's gateway answered for it; not posted, tried again.
* another 5xx: the service may have posted it: unknown (Matrix: tried again with the
  same transaction id, which the homeserver answers with the event it already made).
* 3xx and every other 4xx: refused for good (a redirect is never followed with a
  secret in its URL); 401, 403, 404 say the destination is gone.
* no answer: never sent (no connection) is tried again; sent and unanswered (a timeout,
  a connection lost) is unknown, but for Matrix.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import quote

from bot.domain.channel_states import Service
from bot.domain.text import html_text, one_line

LONGEST_WAIT = 3_600.0  # a Retry-After longer than an hour is taken as an hour


@dataclass(frozen=True, slots=True)
class ChatRequest:
    method: str
    url: str = field(repr=False)
    headers: Mapping[str, str] = field(repr=False)
    body: bytes


class PostVerdict(StrEnum):
    POSTED = "posted"
    AGAIN = "again"  # not posted: try again after a while
    WAIT = "wait"  # rate limited: not posted, try again after *wait* seconds
    REFUSED = "refused"  # not posted, never will be as it is
    UNKNOWN = "unknown"  # may be posted: never again by itself


@dataclass(frozen=True, slots=True)
class Judged:
    verdict: PostVerdict
    detail: str  # one line, no secret
    code: int | None = None
    wait: float = 0.0


def transaction_id(digest_id: int, number: int) -> str:
    """A new Matrix transaction id for a part, kept with it and sent with every try of
    it: random, so that no part of a store made afresh (the same digest ids again) is
    taken by the homeserver for one it has already seen."""
    return f"digestbot.{digest_id}.{number}.{uuid.uuid4().hex}"


def request_for(service: Service, url: str, chat: str, token: str, blocks: list[str], txn: str) -> ChatRequest:
    """The request that posts one part (*blocks*, in the service's markup)."""
    text = "\n\n".join(blocks)
    json_headers = {"Content-Type": "application/json"}
    if service is Service.DISCORD:
        payload: dict[str, object] = {"content": text, "allowed_mentions": {"parse": []}, "flags": 4}
        return ChatRequest("POST", url + "?wait=true", json_headers, _json(payload))
    if service is Service.SLACK:
        sections = [{"type": "section", "text": {"type": "mrkdwn", "text": block}} for block in blocks]
        # "text" is the notification's line: the heading, which every part opens with.
        payload = {
            "text": blocks[0] if blocks else "",
            "blocks": sections,
            "unfurl_links": False,
            "unfurl_media": False,
        }
        return ChatRequest("POST", url, json_headers, _json(payload))
    if service is Service.MATTERMOST:
        return ChatRequest("POST", url, json_headers, _json({"text": text}))
    if service is Service.TELEGRAM:
        payload = {
            "chat_id": chat,
            "text": text,
            "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": True},
        }
        return ChatRequest("POST", url + "/sendMessage", json_headers, _json(payload))
    content = {
        "msgtype": "m.notice",
        "body": "\n\n".join(html_text(block) for block in blocks),
        "format": "org.matrix.custom.html",
        "formatted_body": "<br><br>".join(block.replace("\n", "<br>") for block in blocks),
        "m.mentions": {},
    }
    path = f"/_matrix/client/v3/rooms/{quote(chat, safe='')}/send/m.room.message/{quote(txn, safe='')}"
    return ChatRequest("PUT", url + path, {**json_headers, "Authorization": f"Bearer {token}"}, _json(content))


def _json(payload: Mapping[str, object]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def judge(service: Service, status: int, headers: Mapping[str, str], body: bytes) -> Judged:
    """What the service's answer to one part means."""
    said = f"{status} {_said(body)}".strip()
    if 200 <= status < 300:
        # Discord says when the next post would be refused: the destination waits first.
        spent = headers.get("X-RateLimit-Remaining") == "0"
        wait = _retry_after({"X-RateLimit-Reset-After": headers.get("X-RateLimit-Reset-After", "")}, b"", 0.0)
        return Judged(PostVerdict.POSTED, f"{status} posted", status, wait if spent else 0.0)
    if status == 429:
        wait = _retry_after(headers, body)
        return Judged(PostVerdict.WAIT, f"429 rate limited: wait {wait:g} s", status, wait)
    if status in (502, 503, 504) or (status >= 500 and service is Service.MATRIX):
        return Judged(PostVerdict.AGAIN, said, status, _retry_after(headers, body, default=0.0))
    if status >= 500:
        return Judged(PostVerdict.UNKNOWN, f"{said} (the service may have posted it)", status)
    if 300 <= status < 400:
        return Judged(PostVerdict.REFUSED, f"{status} a redirect, not followed with the destination's secret", status)
    if status in (401, 403, 404):
        return Judged(PostVerdict.REFUSED, f"{said}: the destination was refused or is gone", status)
    return Judged(PostVerdict.REFUSED, said, status)


def unanswered(service: Service, detail: str, *, maybe_sent: bool) -> Judged:
    """What a request that got no whole answer means."""
    if not maybe_sent:
        return Judged(PostVerdict.AGAIN, f"not sent: {detail}")
    if service is Service.MATRIX:
        return Judged(PostVerdict.AGAIN, f"no answer: {detail} (tried again with the same transaction id)")
    return Judged(PostVerdict.UNKNOWN, f"no answer: {detail} (the service may have posted it)")


def _said(body: bytes) -> str:
    """The gist of an error answer, one short line."""
    try:
        found = json.loads(body[:4_096].decode("utf-8"))
    except (ValueError, UnicodeError, RecursionError):
        return one_line(body[:120].decode("utf-8", "replace"))[:120]
    if isinstance(found, dict):
        for name in ("description", "error", "message", "errcode"):
            if isinstance(found.get(name), str):
                return one_line(found[name])[:120]
    return ""


def _retry_after(headers: Mapping[str, str], body: bytes, default: float = 5.0) -> float:
    """Seconds to wait, from the header or the body, between 0 and ``LONGEST_WAIT``."""
    # (value, its unit in seconds): a string of digits may be any size, so it is made a
    # float (inf at worst) before it is scaled, never divided as an int.
    candidates: list[tuple[object, float]] = [(headers.get("Retry-After"), 1.0)]
    candidates.append((headers.get("X-RateLimit-Reset-After"), 1.0))
    try:
        found = json.loads(body[:4_096].decode("utf-8")) if body else None
    except (ValueError, UnicodeError, RecursionError):
        found = None
    if isinstance(found, dict):
        parameters = found.get("parameters")
        candidates += [
            (found.get("retry_after"), 1.0),
            (parameters.get("retry_after") if isinstance(parameters, dict) else None, 1.0),
            (found.get("retry_after_ms"), 0.001),
        ]
    for candidate, unit in candidates:
        try:
            seconds = float(str(candidate)) * unit
        except ValueError:
            continue
        if seconds == seconds and seconds >= 0:  # not NaN
            return min(seconds, LONGEST_WAIT)
    return default
