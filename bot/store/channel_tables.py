"""The tables of the channels (``bot.channels``): a channel, the subscriber whose
choices it has, and each part of each of its digests with its state.
``bot.store.schema`` imports this module, so that ``Base.metadata`` holds them; change
them only with a new Alembic revision."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from bot.store.base import Base, UTCDateTime


class ChannelRow(Base):
    """A chat room digests are posted to.  Its choices (filter, zone, hour, cadence,
    status) are its subscriber's row; ``sealed_destination`` the destination's text
    sealed with the site's secrets key (``bot.sealed``), never stored, shown or backed
    up in clear; ``shown`` what listings show of it.  ``held_until``: the service asked
    to wait (429) until then."""

    __tablename__ = "channels"

    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(40), unique=True)
    service: Mapped[str] = mapped_column(String(16))
    sealed_destination: Mapped[str] = mapped_column(Text)
    shown: Mapped[str] = mapped_column(String(200))
    held_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ChannelPartRow(Base):
    """One message of a channel's digest: its state (``bot.domain.channel_states.
    PartState``), the Matrix transaction id every try of it sends, and the service's
    last answer."""

    __tablename__ = "channel_parts"

    digest_id: Mapped[int] = mapped_column(ForeignKey("digests.id", ondelete="CASCADE"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)  # 1, 2, … of ``total``
    total: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(12))
    transaction_id: Mapped[str] = mapped_column(String(80))
    tries: Mapped[int] = mapped_column(Integer, default=0)
    code: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str | None] = mapped_column(Text)  # the last answer, one line
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
