"""Channels stage, the operator's service: add, change, list, remove and test a channel.
A channel is a subscriber of another kind: its choices are a subscriber row (planned,
shown in ``history``, resent and counted as any reader's), its address a stand-in at
the reserved ``.invalid`` domain that no form, import or command takes as a reader's,
and its destination a sealed secret beside it.  Never prints; the CLI words it.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.channels.chat_digest import ChatDigest, parts_of
from bot.channels.chat_requests import Judged, request_for
from bot.channels.destinations import DestinationError, parse_destination, shown
from bot.channels.posting import ChatPoster
from bot.config import Settings
from bot.domain import Subscriber, SubscriberFields
from bot.domain.channel_states import Service
from bot.sealed import sealer_of
from bot.store import channels as store
from bot.store.channel_tables import ChannelRow
from bot.store.engine import transaction
from bot.store.subscribers import get_subscriber, subscribers_by_ids, upsert_subscribers
from bot.subscribers.subscriptions import defaults

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
STAND_IN_DOMAIN = "channels.invalid"  # reserved (RFC 2606): no reader's address is here


class ChannelError(ValueError):
    """A channel that cannot be added or changed as asked; one line, no secret."""


class ChannelNotFound(ChannelError):
    """No channel by the name given."""


@dataclass(frozen=True, slots=True)
class Channel:
    name: str
    service: Service
    shown: str  # the destination as listings show it
    subscriber: Subscriber
    held_until: datetime | None


def stand_in(name: str) -> str:
    return f"{name}@{STAND_IN_DOMAIN}"


def is_channel_address(email: str) -> bool:
    return email.lower().endswith("@" + STAND_IN_DOMAIN)


def _checked_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ChannelError(f"{name!r} is not a channel name: lower-case letters, digits, - and _, at most 40")
    return name


def _sealed(settings: Settings, text: str, service: Service | None) -> tuple[Service, str, str]:
    try:
        destination = parse_destination(text, service)
    except DestinationError as exc:
        raise ChannelError(f"destination: {exc}") from None
    return destination.service, sealer_of(settings).seal(text.strip()), shown(text, destination)


def add_channel(
    factory: sessionmaker[Session],
    settings: Settings,
    name: str,
    destination: str,
    fields: SubscriberFields,
    now: datetime,
    service: Service | None = None,
) -> Channel:
    """A new channel named *name* posting to *destination* with the choices *fields*."""
    _checked_name(name)
    if fields.cadence == "feed":
        raise ChannelError("--cadence: a channel is posted to; 'feed' is a reader's feed")
    kind, sealed, listed = _sealed(settings, destination, service)
    with transaction(factory) as session:
        if store.channel_named(session, name) is not None or get_subscriber(session, stand_in(name)) is not None:
            raise ChannelError(f"a channel {name!r} exists already (channels edit changes it)")
        chosen = replace(fields, email=stand_in(name), name=fields.name or f"#{name}")
        upsert_subscribers(session, [chosen], defaults=defaults(settings), now=now)
        subscriber = get_subscriber(session, stand_in(name))
        assert subscriber is not None
        row = ChannelRow(
            subscriber_id=subscriber.id,
            name=name,
            service=kind.value,
            sealed_destination=sealed,
            shown=listed,
            created_at=now,
        )
        store.add_channel(session, row)
        return _view(row, subscriber)


def edit_channel(
    factory: sessionmaker[Session],
    settings: Settings,
    name: str,
    fields: SubscriberFields,
    now: datetime,
    destination: str | None = None,
    service: Service | None = None,
) -> Channel:
    """*name*'s choices changed to the given *fields*; with *destination*, a new one."""
    if fields.cadence == "feed":
        raise ChannelError("--cadence: a channel is posted to; 'feed' is a reader's feed")
    with transaction(factory) as session:
        row = _require(session, name)
        if destination is not None:
            kind, sealed, listed = _sealed(settings, destination, service)
            store.change_channel(
                session, row.subscriber_id, service=kind.value, sealed_destination=sealed, shown=listed, held_until=None
            )
        upsert_subscribers(session, [replace(fields, email=stand_in(name))], defaults=defaults(settings), now=now)
        session.expire_all()
        return _view(_require(session, name), subscribers_by_ids(session, [row.subscriber_id])[row.subscriber_id])


def remove_channel(factory: sessionmaker[Session], name: str) -> None:
    """*name* forgotten: its destination, its choices, its digests."""
    with transaction(factory) as session:
        store.remove_channel(session, _require(session, name).subscriber_id)


def list_channels(factory: sessionmaker[Session]) -> list[Channel]:
    with transaction(factory) as session:
        rows = store.all_channels(session)
        subscribers = subscribers_by_ids(session, [row.subscriber_id for row in rows])
        return [_view(row, subscribers[row.subscriber_id]) for row in rows if row.subscriber_id in subscribers]


def post_test_message(factory: sessionmaker[Session], settings: Settings, name: str) -> Judged:
    """One short message posted to *name* now, and what its service answered."""
    with transaction(factory) as session:
        row = _require(session, name)
    opened = sealer_of(settings).open(row.sealed_destination)
    try:
        destination = parse_destination(opened or "", Service(row.service))
    except DestinationError:
        raise ChannelError(f"{name}: the destination cannot be read (sealed with another secrets key?)") from None
    test = ChatDigest(f"digestbot: a test message for channel {name}; its digests come here", ())
    blocks = parts_of(test, destination.service)[0]
    txn = f"digestbot.test.{uuid.uuid4().hex}"
    request = request_for(destination.service, destination.url, destination.chat, destination.token, blocks, txn)
    poster = ChatPoster(settings)
    try:
        return poster.post(destination.service, request)
    finally:
        poster.close()


def _require(session: Session, name: str) -> ChannelRow:
    row = store.channel_named(session, name)
    if row is None:
        raise ChannelNotFound(f"no channel {name!r} (channels list shows them)")
    return row


def _view(row: ChannelRow, subscriber: Subscriber) -> Channel:
    return Channel(row.name, Service(row.service), row.shown, subscriber, row.held_until)
