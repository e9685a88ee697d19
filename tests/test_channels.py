"""Channels: digests posted to chat rooms, each part once.  The destinations read,
the chat-shaped digest within each service's limits with nothing a title could ping or
link (a hypothesis property), what each answer means, and whole deliveries against a
local server speaking each service's API (``tests/chat_servers.py``, a process) in its
honest and hostile modes, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.channels.channel_service import ChannelError, add_channel, list_channels, post_test_message, remove_channel
from bot.channels.chat_digest import LIMITS, ChatDigest, ChatEntry, parts_of
from bot.channels.chat_requests import PostVerdict, judge, request_for, unanswered
from bot.channels.delivering import deliver_channels
from bot.channels.destinations import DestinationError, parse_destination, shown
from bot.channels.markup import MARKUPS
from bot.channels.part_rules import digest_after
from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.config.services import ChannelsConfig
from bot.domain import DigestState, SubscriberFields
from bot.domain.channel_states import PartState, Service
from bot.ingest.storing import ingest_file
from bot.plan import plan, resend
from bot.store.channel_tables import ChannelPartRow, ChannelRow
from bot.store.engine import transaction
from bot.store.queue import claim_due
from bot.store.schema import Digest
from tests.chat_servers import ChatServers
from tests.conftest import ROOT
from tests.helpers import settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)
KEY = b"k" * 32
SECRET = "Zs3cr3tT0k3nZ"


# --- destinations -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "service", "url"),
    [
        ("slack://T000/B000/" + SECRET, Service.SLACK, "https://hooks.slack.com/services/T000/B000/" + SECRET),
        ("https://hooks.slack.com/services/T0/B0/" + SECRET, Service.SLACK, ""),
        ("discord://1234/" + SECRET, Service.DISCORD, "https://discord.com/api/webhooks/1234/" + SECRET),
        ("https://discord.com/api/webhooks/1234/" + SECRET, Service.DISCORD, ""),
        ("mmosts://chat.example.org/" + SECRET, Service.MATTERMOST, "https://chat.example.org/hooks/" + SECRET),
        ("tgram://123456:" + SECRET + "/-100200", Service.TELEGRAM, "https://api.telegram.org/bot123456:" + SECRET),
        ("matrixs://" + SECRET + "@matrix.example.org/!room:example.org", Service.MATRIX, "https://matrix.example.org"),
    ],
)
def test_a_destination_is_read_and_shown_without_its_secret(text: str, service: Service, url: str) -> None:
    destination = parse_destination(text)
    assert destination.service is service
    if url:
        assert destination.url == url
    listed = shown(text, destination)
    assert SECRET not in listed and service.value in listed
    assert SECRET not in repr(destination)


@pytest.mark.parametrize(
    "text",
    [
        "http://hooks.example.org/hooks/" + SECRET,  # plain http off the machine: the secret in clear
        "ftp://example.org/" + SECRET,
        "https://unknown.example.org/x/" + SECRET,  # which service? --service says
        "slack://only/" + SECRET,
        "tgram://" + SECRET + "/not a chat",
        "matrixs://" + SECRET + "@example.org/#alias:example.org",
        "discord://1234/\n" + SECRET,
        "x" * 5000,
    ],
)
def test_a_destination_that_cannot_be_posted_to_is_refused_in_one_line_without_the_secret(text: str) -> None:
    with pytest.raises(DestinationError) as refused:
        parse_destination(text)
    assert SECRET not in str(refused.value) and "\n" not in str(refused.value)


# --- the chat-shaped digest -----------------------------------------------------------

_PIECES = [*"ab c@<>&*_~`|[]()#!:/.\\-\"'\u202e\u200b", "@everyone", "@here", "@channel", "@room", "https://x.y"]
_HOSTILE = st.lists(st.sampled_from(_PIECES), max_size=200).map("".join) | st.text(max_size=3000)


def _digest(titles: list[str], tldrs: list[str]) -> ChatDigest:
    entries = tuple(
        ChatEntry(title, f"https://arxiv.org/abs/2512.{n:05d}", tldr, "Matches your filter: " + title[:40])
        for n, (title, tldr) in enumerate(zip(titles, tldrs, strict=False))
    )
    return ChatDigest("3 new entries: llm (2026-12-07)", entries, "https://digest.example.org/d/TOKEN/2026-12-07", 2)


def _length(service: Service, blocks: list[str]) -> int:
    request = request_for(service, "https://h.example", "!r:h", "t", blocks, "txn")
    if service is Service.MATRIX:
        return len(request.body)
    payload = json.loads(request.body)
    text = payload.get("content") or payload.get("text") if service is not Service.SLACK else "\n\n".join(blocks)
    return MARKUPS[service].length(text)


@settings(max_examples=150, deadline=None)
@given(st.lists(_HOSTILE, min_size=0, max_size=40), st.lists(_HOSTILE, max_size=40), st.sampled_from(list(Service)))
def test_no_part_exceeds_its_service_limit_and_no_title_pings_or_links(
    titles: list[str], tldrs: list[str], service: Service
) -> None:
    digest = _digest(titles, tldrs + [""] * len(titles))
    parts = parts_of(digest, service)
    assert 1 <= len(parts) <= 4
    limits = LIMITS[service]
    ours = {entry.url for entry in digest.entries} | {digest.web_url}
    for blocks in parts:
        measured = _length(service, blocks)
        assert measured <= (65_536 - 1_024 if service is Service.MATRIX else limits.message)
        assert len(blocks) <= limits.blocks
        assert all(MARKUPS[service].length(block) <= limits.block for block in blocks)
        text = "\n\n".join(blocks)
        for mention in ("@everyone", "@here", "@channel", "@room"):
            assert mention not in text
        assert not re.search(r"(?<!\\)<[@!#]", text)  # Slack's and Discord's mention markup, unescaped
        # Every address in the text is one digestbot put there: a title makes no link.
        for found in re.findall(r"https?://[^\s<>|\")\]]*", text):
            assert any(found.startswith(url[: len(found)]) or url.startswith(found) for url in ours), found
        assert "\u202e" not in text
    if service in (Service.TELEGRAM, Service.MATRIX):
        tags = set(re.findall(r"</?([a-zA-Z]+)", "".join("".join(p) for p in parts)))
        assert tags <= {"a", "b"}


def test_a_long_digest_is_cut_into_numbered_parts_and_the_rest_left_for_the_web() -> None:
    digest = _digest([f"Paper {n} " + "word " * 60 for n in range(60)], ["A long TL;DR. " * 20] * 60)
    parts = parts_of(digest, Service.DISCORD)
    assert len(parts) == 4
    assert [f"{n}/4" in p[0] for n, p in enumerate(parts, 1)] == [True] * 4
    assert "more on the web" in parts[-1][-1]


# --- what an answer means -------------------------------------------------------------


def test_what_each_answer_means() -> None:
    assert judge(Service.DISCORD, 204, {}, b"").verdict is PostVerdict.POSTED
    spent = judge(Service.DISCORD, 200, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset-After": "1.5"}, b"")
    assert (spent.verdict, spent.wait) == (PostVerdict.POSTED, 1.5)  # posted; the next one waits
    limited = judge(Service.DISCORD, 429, {}, b'{"retry_after": 2.5, "global": false}')
    assert (limited.verdict, limited.wait) == (PostVerdict.WAIT, 2.5)
    assert judge(Service.TELEGRAM, 429, {}, b'{"ok":false,"parameters":{"retry_after":7}}').wait == 7
    assert judge(Service.MATRIX, 429, {}, b'{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":1500}').wait == 1.5
    assert judge(Service.SLACK, 429, {"Retry-After": "30"}, b"").wait == 30
    assert judge(Service.SLACK, 429, {"Retry-After": "1e300"}, b"").wait == 3600
    huge = b'{"retry_after_ms": 1' + b"0" * 400 + b"}"  # an int no float holds
    assert judge(Service.MATRIX, 429, {}, huge).wait == 3600
    assert judge(Service.SLACK, 503, {}, b"").verdict is PostVerdict.AGAIN
    assert judge(Service.SLACK, 500, {}, b"").verdict is PostVerdict.UNKNOWN
    assert judge(Service.MATRIX, 500, {}, b"").verdict is PostVerdict.AGAIN  # the same transaction id
    assert judge(Service.MATTERMOST, 404, {}, b"").verdict is PostVerdict.REFUSED
    assert judge(Service.DISCORD, 302, {"Location": "https://elsewhere"}, b"").verdict is PostVerdict.REFUSED
    assert unanswered(Service.DISCORD, "timeout", maybe_sent=True).verdict is PostVerdict.UNKNOWN
    assert unanswered(Service.DISCORD, "unreachable", maybe_sent=False).verdict is PostVerdict.AGAIN
    assert unanswered(Service.MATRIX, "timeout", maybe_sent=True).verdict is PostVerdict.AGAIN


def test_what_a_digest_becomes_after_its_parts() -> None:
    config = ChannelsConfig(attempts=3)
    sent, pending, unknown = PartState.SENT, PartState.PENDING, PartState.UNKNOWN
    assert digest_after([sent, sent], 1, config, DAY).state is DigestState.SENT
    assert digest_after([sent, unknown, pending], 1, config, DAY).state is DigestState.UNKNOWN
    assert digest_after([sent, PartState.FAILED], 1, config, DAY).state is DigestState.FAILED
    waiting = digest_after([sent, pending], 1, config, DAY, wait=30)
    assert (waiting.state, waiting.retry_at) == (DigestState.RETRY_WAIT, DAY + timedelta(seconds=30))
    assert digest_after([sent, pending], 3, config, DAY).state is DigestState.FAILED


# --- whole deliveries -----------------------------------------------------------------


def _destination(chat: ChatServers, service: Service) -> str:
    port = chat.port
    return {
        Service.SLACK: f"{chat.url}/services/T0/B0/{SECRET}",
        Service.DISCORD: f"{chat.url}/api/webhooks/1234/{SECRET}",
        Service.MATTERMOST: f"mmost://127.0.0.1:{port}/{SECRET}",
        Service.TELEGRAM: f"{chat.url}/bot123:{SECRET}?chat_id=-100200",
        Service.MATRIX: f"matrix://{SECRET}@127.0.0.1:{port}/!room:example.org",
    }[service]


def _settings(tmp_path: Path, **channels: object) -> Settings:
    return settings_for(tmp_path, site=True, channels={"answer_seconds": 1.5, "connect_seconds": 1, **channels})


def _channel_with_a_digest(
    factory: sessionmaker[Session], settings: Settings, chat: ChatServers, service: Service, seed_files: list[Path]
) -> int:
    """A channel of *service* and its planned digest's id."""
    fields = SubscriberFields(email="", filter="*", backfill="all")
    kind = None if service in (Service.MATTERMOST, Service.MATRIX) else service
    add_channel(factory, settings, "lab", _destination(chat, service), fields, DAY - timedelta(days=1), kind)
    for seed in seed_files:
        ingest_file(factory, seed, now=DAY, rules=RULES)
    plan(factory, settings, RULES, now=DAY, all_due=True)
    with factory() as session:
        ids = list(session.scalars(select(Digest.id)))
    assert len(ids) == 1
    return ids[0]


def _deliver(factory: sessionmaker[Session], settings: Settings, at: datetime = DAY) -> object:
    return deliver_channels(factory, settings, KEY, lambda: at, worker="w1")


def _state(factory: sessionmaker[Session], digest_id: int) -> tuple[str, list[str]]:
    with factory() as session:
        digest = session.get(Digest, digest_id)
        assert digest is not None
        parts = session.scalars(select(ChannelPartRow.state).where(ChannelPartRow.digest_id == digest_id))
        return digest.state, sorted(parts)


@pytest.mark.parametrize("service", list(Service))
def test_a_channel_gets_its_digest_once_as_its_service_takes_it(
    factory: sessionmaker[Session], tmp_path: Path, chat: ChatServers, seed_files: list[Path], service: Service
) -> None:
    settings = _settings(tmp_path)
    digest_id = _channel_with_a_digest(factory, settings, chat, service, seed_files)
    with transaction(factory) as session:  # the mail's worker never takes a channel's digest
        assert claim_due(session, now=DAY, worker="mail", lease_seconds=60, limit=100) == []
    _deliver(factory, settings)
    state, parts = _state(factory, digest_id)
    assert state == "sent" and parts and set(parts) == {"sent"}
    received = chat.received()
    assert len(received) == len(parts) and {r["service"] for r in received} == {service.value}
    _deliver(factory, settings, DAY + timedelta(hours=1))
    assert len(chat.received()) == len(parts)
    with factory() as session:  # the destination is stored only sealed
        sealed = session.scalars(select(ChannelRow.sealed_destination)).one()
        assert SECRET not in sealed
    assert SECRET not in list_channels(factory)[0].shown


def test_a_post_answered_never_is_unknown_and_never_posted_again_by_itself(
    factory: sessionmaker[Session],
    tmp_path: Path,
    chat: ChatServers,
    seed_files: list[Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = _settings(tmp_path)
    digest_id = _channel_with_a_digest(factory, settings, chat, Service.DISCORD, seed_files)
    chat.control("accept_then_hang")
    _deliver(factory, settings)
    assert _state(factory, digest_id)[0] == "unknown"
    assert "unknown" in _state(factory, digest_id)[1]
    _deliver(factory, settings, DAY + timedelta(hours=2))
    assert len(chat.received()) == 1  # the one the service took: never again by itself
    assert SECRET not in caplog.text
    again = resend(factory, settings, digest_id, now=DAY + timedelta(hours=3))  # the operator's word
    _deliver(factory, settings, DAY + timedelta(hours=3))
    assert _state(factory, again)[0] == "sent"


def test_matrix_retries_a_lost_answer_with_the_same_transaction_and_gets_one_event(
    factory: sessionmaker[Session], tmp_path: Path, chat: ChatServers, seed_files: list[Path]
) -> None:
    settings = _settings(tmp_path, retry_base_seconds=1)
    digest_id = _channel_with_a_digest(factory, settings, chat, Service.MATRIX, seed_files)
    chat.control("accept_then_drop")
    _deliver(factory, settings)
    assert _state(factory, digest_id)[0] == "retry_wait"
    _deliver(factory, settings, DAY + timedelta(minutes=5))
    assert _state(factory, digest_id)[0] == "sent"
    assert len(chat.received()) == len(_state(factory, digest_id)[1])  # one event a part


def test_a_rate_limit_holds_the_destination_for_as_long_as_asked(
    factory: sessionmaker[Session], tmp_path: Path, chat: ChatServers, seed_files: list[Path]
) -> None:
    settings = _settings(tmp_path)
    digest_id = _channel_with_a_digest(factory, settings, chat, Service.SLACK, seed_files)
    chat.control("status", status=429, retry_after=30)
    _deliver(factory, settings)
    assert _state(factory, digest_id)[0] == "retry_wait"
    _deliver(factory, settings, DAY + timedelta(seconds=20))
    assert chat.received() == []
    _deliver(factory, settings, DAY + timedelta(seconds=31))
    assert _state(factory, digest_id)[0] == "sent"


@pytest.mark.parametrize(("status", "state"), [(503, "retry_wait"), (500, "unknown"), (404, "failed"), (302, "failed")])
def test_each_refusal_does_what_it_means(
    factory: sessionmaker[Session], tmp_path: Path, chat: ChatServers, seed_files: list[Path], status: int, state: str
) -> None:
    settings = _settings(tmp_path)
    digest_id = _channel_with_a_digest(factory, settings, chat, Service.MATTERMOST, seed_files)
    if status == 302:
        chat.control("redirect")
    else:
        chat.control("status", status=status)
    _deliver(factory, settings)
    assert _state(factory, digest_id)[0] == state


def test_a_part_not_posted_leaves_the_parts_before_it_posted_once(
    factory: sessionmaker[Session], tmp_path: Path, chat: ChatServers, seed_files: list[Path]
) -> None:
    settings = _settings(tmp_path, most_parts=20)
    digest_id = _channel_with_a_digest(factory, settings, chat, Service.DISCORD, seed_files)
    with factory() as session:
        total = _parts_planned(session, digest_id)
    assert total >= 2, "the seed's digest should take more than one Discord message"
    chat.control("status", status=200, times=1, body={"id": "1"})  # taken, but not recorded by the server
    chat.control("status", status=503)
    _deliver(factory, settings)
    assert _state(factory, digest_id)[0] == "retry_wait"
    _deliver(factory, settings, DAY + timedelta(hours=2))
    state, parts = _state(factory, digest_id)
    assert state == "sent" and len(parts) == total
    assert len(chat.received()) == total - 1  # part 1 was answered by the mode, not posted twice


def _parts_planned(session: Session, digest_id: int) -> int:
    from bot.channels.posting import chat_digest_of
    from bot.store.contents import digest_content

    content = digest_content(session, digest_id)
    return len(parts_of(chat_digest_of(content, Settings(), KEY), Service.DISCORD, 20))


def test_operator_service_refuses_what_it_cannot_take(
    factory: sessionmaker[Session], tmp_path: Path, chat: ChatServers
) -> None:
    settings = _settings(tmp_path)
    fields = SubscriberFields(email="", filter="*")
    with pytest.raises(ChannelError, match="not a channel name"):
        add_channel(factory, settings, "Lab Room", _destination(chat, Service.SLACK), fields, DAY, Service.SLACK)
    with pytest.raises(ChannelError, match="feed"):
        add_channel(
            factory,
            settings,
            "lab",
            _destination(chat, Service.SLACK),
            SubscriberFields(email="", cadence="feed"),
            DAY,
            Service.SLACK,
        )
    add_channel(factory, settings, "lab", _destination(chat, Service.SLACK), fields, DAY, Service.SLACK)
    with pytest.raises(ChannelError, match="exists already"):
        add_channel(factory, settings, "lab", _destination(chat, Service.SLACK), fields, DAY, Service.SLACK)
    assert post_test_message(factory, settings, "lab").verdict is PostVerdict.POSTED
    assert chat.received()[0]["service"] == "slack"
    remove_channel(factory, "lab")
    assert list_channels(factory) == []


def test_a_stop_between_two_parts_gives_the_rest_back_and_posts_it_once_later(
    factory: sessionmaker[Session], tmp_path: Path, chat: ChatServers, seed_files: list[Path]
) -> None:
    settings = _settings(tmp_path, most_parts=20)
    digest_id = _channel_with_a_digest(factory, settings, chat, Service.DISCORD, seed_files)
    asked = iter([True, True, True, False])  # the pass, the claim, the first part, then a stop
    report = deliver_channels(factory, settings, KEY, lambda: DAY, worker="w1", keep_going=lambda: next(asked, False))
    assert report.given_back == 1 and len(chat.received()) == 1
    with factory() as session:
        digest = session.get(Digest, digest_id)
        assert digest is not None and digest.state in ("queued", "retry_wait") and digest.wire_at is None
    _deliver(factory, settings)
    state, parts = _state(factory, digest_id)
    assert state == "sent" and len(chat.received()) == len(parts) >= 2


def test_a_matrix_part_caught_on_the_wire_by_a_kill_is_posted_again_as_the_same_event(
    factory: sessionmaker[Session], tmp_path: Path, chat: ChatServers, seed_files: list[Path]
) -> None:
    from sqlalchemy import update

    settings = _settings(tmp_path)
    digest_id = _channel_with_a_digest(factory, settings, chat, Service.MATRIX, seed_files)
    chat.control("accept_then_hang")  # the homeserver makes the event; no answer comes
    _deliver(factory, settings)
    with transaction(factory) as session:  # as a kill mid-request leaves them once the lease ran out
        session.execute(update(Digest).where(Digest.id == digest_id).values(state="unknown"))
        session.execute(update(ChannelPartRow).where(ChannelPartRow.number == 1).values(state="sending"))
    _deliver(factory, settings, DAY + timedelta(minutes=10))
    state, parts = _state(factory, digest_id)
    assert state == "sent" and len(chat.received()) == len(parts)  # one event a part, none twice


def test_a_refusal_whose_body_is_too_long_is_still_a_refusal(
    factory: sessionmaker[Session], tmp_path: Path, chat: ChatServers, seed_files: list[Path]
) -> None:
    settings = _settings(tmp_path)
    digest_id = _channel_with_a_digest(factory, settings, chat, Service.DISCORD, seed_files)
    chat.control("status", status=429, retry_after=30, body="x" * 100_000)  # over the answer's cap
    _deliver(factory, settings)
    assert _state(factory, digest_id)[0] == "retry_wait"  # not "unknown": the status said not posted


def test_a_digest_that_cannot_be_shaped_fails_alone(
    factory: sessionmaker[Session],
    tmp_path: Path,
    chat: ChatServers,
    seed_files: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import bot.channels.delivering as delivering

    settings = _settings(tmp_path)
    fields = SubscriberFields(email="", filter="*", backfill="all")
    for name in ("one", "two"):
        add_channel(
            factory, settings, name, _destination(chat, Service.SLACK), fields, DAY - timedelta(1), Service.SLACK
        )
    ingest_file(factory, seed_files[0], now=DAY, rules=RULES)
    plan(factory, settings, RULES, now=DAY, all_due=True)
    with factory() as session:
        first, second = sorted(session.scalars(select(Digest.id)))
    shaped = delivering.chat_digest_of

    def poisoned(content: object, *args: object) -> object:
        if getattr(content, "digest_id", None) == first:
            raise ValueError(f"a bug quoting {SECRET}")
        return shaped(content, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(delivering, "chat_digest_of", poisoned)
    _deliver(factory, settings)
    assert _state(factory, first)[0] == "failed" and _state(factory, second)[0] == "sent"
    assert SECRET not in caplog.text and "ValueError" in caplog.text
