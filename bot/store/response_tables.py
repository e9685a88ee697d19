"""Tables of what comes back from readers and their mail: unsubscribe requests (the
journal's copy) and those applied, the consent record, sign-up requests and returned
mail.  Declarative models on ``base.Base`` like ``schema``'s; change them only together
with a new Alembic revision."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from bot.store.base import Base, UTCDateTime, partial_index


class UnsubscribeRequest(Base):
    """An acknowledged unsubscribe, written before the answer is sent (the journal).

    On SQLite this table lives in a database file of its own (``store.journal``),
    so that a burst of requests never waits for the store's one writer; on
    PostgreSQL it is a table of the store.  ``applied`` is set once the
    subscriber's status has changed; ``AppliedUnsubscribe`` makes that happen once."""

    __tablename__ = "unsubscribe_requests"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # uuid4 hex
    subscriber_id: Mapped[int] = mapped_column(Integer)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime)
    applied: Mapped[bool] = mapped_column(Boolean, default=False)

    __table_args__ = (partial_index("ix_unsubscribe_requests_pending", "subscriber_id", where="NOT applied"),)


class AppliedUnsubscribe(Base):
    """Which journal requests the store has applied: one row each, in the same
    transaction as the status change, so a request is never applied twice."""

    __tablename__ = "applied_unsubscribes"

    request_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    applied_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Consent(Base):
    """How a subscriber came to be subscribed, kept so an operator can prove it:
    ``signup`` (the form was sent: page, client address), ``confirm`` (the link in
    the confirmation mail was followed and confirmed) or ``operator`` (added by an
    operator, who vouches for the consent: ``detail`` says how)."""

    __tablename__ = "consents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"), index=True)
    event: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    address: Mapped[str] = mapped_column(String(320))  # the email address it was for, as given then
    page: Mapped[str] = mapped_column(String(500), server_default="")
    client: Mapped[str] = mapped_column(String(64), server_default="")  # the IP address of the browser
    detail: Mapped[str] = mapped_column(Text, server_default="")


class SignupRequest(Base):
    """One sign-up form submission (or a reader's library upload, ``library:<id>``),
    kept an hour: the per-client and per-reader limits."""

    __tablename__ = "signup_requests"
    __table_args__ = (Index("ix_signup_requests_client_at", "client", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    client: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UTCDateTime)


class ReturnEventRow(Base):
    """What a message read from the inbox did (``bot.returns``), for the subscriber it
    names, if any; ``message_key`` (its SHA-256) records it once.  ``cleared`` rows mark
    where ``subscribers resume`` started the count of hard bounces again."""

    __tablename__ = "return_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    message_key: Mapped[str | None] = mapped_column(String(64), unique=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    subscriber_id: Mapped[int | None] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"), index=True)
    digest_id: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    address: Mapped[str] = mapped_column(String(320), server_default="")
    status: Mapped[str] = mapped_column(String(16), server_default="")
    diagnostic: Mapped[str] = mapped_column(String(300), server_default="")
