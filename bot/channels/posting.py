"""Channels stage, one part on the wire: a channel's digest as chat text
(``chat_digest_of``) and one request through the bounded reader, judged.  Never
records anything (``delivering`` does) and never puts a destination's secret into a
line it returns: a failure is said by its kind, never by the URL it had.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.bounded_http import TIMEOUT, BoundedHttp, HttpFailure, HttpLimits
from bot.channels.chat_digest import ChatDigest, ChatEntry
from bot.channels.chat_requests import ChatRequest, Judged, judge, unanswered
from bot.config import Settings
from bot.domain import DigestContent
from bot.domain.channel_states import Service
from bot.domain.links import primary_url
from bot.domain.routes import WEB_VERSION
from bot.mail.framing import subject_of, tldr_shown
from bot.tokens import make_token

ANSWER_BYTES = 64 * 1024  # what a service says back to a post; more is not its answer


def chat_digest_of(content: DigestContent, settings: Settings, key: bytes) -> ChatDigest:
    """What a channel's digest says: the mail's subject as its heading, each entry's
    title and where it links (as the mail's), its TL;DR and why line, the web version."""
    entries = tuple(
        ChatEntry(
            title=item.content.title,
            url=primary_url(item.content, settings.digest.search_url, item.url),
            tldr=tldr_shown(item)["tldr"],
            why=item.why,
        )
        for item in content.items
    )
    web = ""
    if settings.web.public_url:
        subscriber = content.subscriber
        token = make_token(key, subscriber.id, subscriber.unsubscribe_secret)
        web = WEB_VERSION.url(settings.web.public_url, token=token, day=content.local_date.isoformat())
    return ChatDigest(subject_of(content), entries, web, content.pending)


class ChatPoster:
    """Posts parts: no redirect followed, a fresh connection each (an idle one the
    service closed would read as a post lost after it went out), each answer bounded."""

    def __init__(self, settings: Settings) -> None:
        config = settings.channels
        self.limits = HttpLimits(config.connect_seconds, config.answer_seconds, ANSWER_BYTES)
        self.http = BoundedHttp(keep_alive=False)

    def post(self, service: Service, request: ChatRequest) -> Judged:
        seen: list[tuple[int, Mapping[str, str]]] = []

        def before_body(status: int, headers: Mapping[str, str]) -> bool:
            seen.append((status, headers))
            return not 200 <= status < 300  # posted: its body does not matter

        try:
            answer = self.http.request(
                request.method,
                request.url,
                limits=self.limits,
                headers=request.headers,
                content=request.body,
                before_body=before_body,
            )
        except HttpFailure as failure:
            if seen:  # the status came, its body did not (too long, too slow): the status says
                status, headers = seen[0]
                return judge(service, status, headers, b"")
            said = str(failure) if failure.kind == TIMEOUT else failure.kind
            return unanswered(service, said, maybe_sent=failure.maybe_sent)
        return judge(service, answer.status, answer.headers, answer.body)

    def close(self) -> None:
        self.http.close()
