"""Sign-up service: double opt-in, its limits and its consent record.

A sign-up (the public page, or ``subscribers add --confirm``) makes a
``pending`` subscriber and mails them a signed link that expires; following
it and pressing "Confirm" makes them ``active``.  What a sign-up mails is
decided by ``signup_step`` alone, from what the store knows of the address,
and the page answers every sign-up the same way, so it never tells whether an
address is subscribed.  Each step is recorded in ``consents``.  Never renders
pages; sends only through ``send``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings, site_url
from bot.domain import REQUEST_WINDOW, ConsentEvent, Subscriber, SubscriberFields, SubscriberStatus
from bot.domain.routes import CONFIRMATION
from bot.domain.statuses import SIGNED_UP, after_confirm
from bot.mail.message import envelope_address
from bot.mail.notices import SignupChoices, already_subscribed, confirmation
from bot.mail.render import web_links
from bot.store.consents import (
    consents_of,
    count_request,
    delete_unconfirmed,
    mailed_at,
    record_consent,
    set_mailed_at,
)
from bot.store.engine import transaction
from bot.store.subscribers import get_subscriber, set_status, subscribers_by_ids, upsert_subscribers
from bot.subscribers.subscriptions import defaults
from bot.tokens import confirm_token_is_valid, confirm_token_parts, make_confirm_token, make_token

log = logging.getLogger(__name__)

# An address that unsubscribed gets no confirmation mail for this long: a sign-up
# form must not become a way to pester someone who just left.
RESUBSCRIBE_AFTER = timedelta(days=1)


class SignupStep(StrEnum):
    CONFIRM = "confirm"  # mail a confirmation link
    REMIND = "remind"  # subscribed already: mail their manage link instead
    QUIET = "quiet"  # mail nothing: one went out within the interval, or they just left


def signup_step(
    status: SubscriberStatus | None,
    *,
    mailed_at: datetime | None,
    changed_at: datetime | None,
    now: datetime,
    interval: timedelta,
) -> SignupStep:
    """What a sign-up for an address mails, given the address's status (None: unknown),
    when a sign-up mail last went to it and when its row last changed."""
    if mailed_at is not None and now - mailed_at < interval:
        return SignupStep.QUIET
    if status is SubscriberStatus.UNSUBSCRIBED:
        recently = changed_at is not None and now - changed_at < RESUBSCRIBE_AFTER
        return SignupStep.QUIET if recently else SignupStep.CONFIRM
    if status is not None and status.subscribed:
        return SignupStep.REMIND
    return SignupStep.CONFIRM  # new, pending, or bounced (and maybe fixed since)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A sign-up mail to send."""

    recipient: str  # envelope form
    data: bytes
    step: SignupStep


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a sign-up or confirmation came from, for the consent record."""

    page: str  # the page's URL, or the CLI command
    client: str = ""  # the browser's IP address
    detail: str = ""


def client_allowed(factory: sessionmaker[Session], settings: Settings, client: str, now: datetime) -> bool:
    """Count one sign-up from *client*; False once it sent more than
    ``web.signups_per_hour`` in the last hour."""
    with transaction(factory) as session:
        return count_request(session, client, now, since=now - REQUEST_WINDOW) <= settings.web.signups_per_hour


def request_signup(
    factory: sessionmaker[Session],
    settings: Settings,
    key: bytes,
    fields: SubscriberFields,
    *,
    origin: Origin,
    now: datetime,
) -> Outgoing | None:
    """Record a sign-up for *fields* (validated) and make the mail it causes, if any
    (``signup_step``).  A new address becomes ``pending``; a pending, bounced or
    long-unsubscribed one takes the new choices but keeps its status until confirmed;
    an active or paused one is left as it is."""
    public = site_url(settings.web)
    interval = timedelta(minutes=settings.web.confirm_interval_minutes)
    with transaction(factory) as session:
        existing = get_subscriber(session, fields.email)
        step = signup_step(
            existing.status if existing else None,
            mailed_at=mailed_at(session, existing.id) if existing else None,
            changed_at=existing.updated_at if existing else None,
            now=now,
            interval=interval,
        )
        if step is SignupStep.QUIET:
            return None
        if step is SignupStep.CONFIRM:
            wanted = replace(fields, status=None if existing else SIGNED_UP)
            upsert_subscribers(session, [wanted], defaults=defaults(settings), now=now)
        subscriber = get_subscriber(session, fields.email)
        assert subscriber is not None
        set_mailed_at(session, subscriber.id, now)
        if step is SignupStep.REMIND:
            manage = web_links(public, make_token(key, subscriber.id, subscriber.unsubscribe_secret)).manage_url or ""
            data = already_subscribed(settings.sender, to_address=subscriber.email, manage_url=manage, now=now)
            return Outgoing(envelope_address(subscriber.email), data, step)
        record_consent(
            session,
            subscriber.id,
            ConsentEvent("signup", now, subscriber.email, origin.page, origin.client, origin.detail),
        )
        expires = now + timedelta(hours=settings.web.confirm_hours)
        token = make_confirm_token(key, subscriber.id, subscriber.unsubscribe_secret, expires)
        data = confirmation(
            settings.sender,
            to_address=subscriber.email,
            url=CONFIRMATION.url(public, token=token),
            expires=expires,
            choices=SignupChoices(subscriber.cadence, subscriber.send_hour, subscriber.timezone),
            now=now,
        )
        return Outgoing(envelope_address(subscriber.email), data, step)


def mail_not_sent(factory: sessionmaker[Session], email: str) -> None:
    """A sign-up mail could not be sent: let the next sign-up for *email* try at once."""
    with transaction(factory) as session:
        found = get_subscriber(session, email)
        if found is not None:
            set_mailed_at(session, found.id, None)


async def send(settings: Settings, outgoing: Outgoing) -> bool:
    """Send one sign-up mail over the configured SMTP; whether it was accepted."""
    from bot.delivery.smtp import Outcome, SmtpPool

    async with SmtpPool.of(settings) as pool:
        result = await pool.send(envelope_address(settings.sender.from_address), outgoing.recipient, outgoing.data)
    if result is None or result.outcome is not Outcome.SENT:
        log.warning("sign-up mail not sent: %s", f"{result.code or ''} {result.detail}" if result else "")
        return False
    return True


class Confirmation(StrEnum):
    CONFIRMED = "confirmed"  # now active
    ALREADY = "already"  # this link was used before, or the address is subscribed anyway
    EXPIRED = "expired"
    UNKNOWN = "unknown"  # not a link we made, or its sign-up was deleted


def check_confirmation(
    factory: sessionmaker[Session], key: bytes, token: str, now: datetime
) -> tuple[Confirmation, Subscriber | None]:
    """What confirming with *token* would do now (nothing is written)."""
    parts = confirm_token_parts(token)
    if parts is None:
        return Confirmation.UNKNOWN, None
    subscriber_id, expires = parts
    with factory() as session:
        subscriber = subscribers_by_ids(session, [subscriber_id]).get(subscriber_id)
        if subscriber is None or not confirm_token_is_valid(
            key, token, subscriber.id, subscriber.unsubscribe_secret, expires
        ):
            return Confirmation.UNKNOWN, None
        return _state(session, subscriber, expires, now), subscriber


def _state(session: Session, subscriber: Subscriber, expires: datetime, now: datetime) -> Confirmation:
    if after_confirm(subscriber.status) is None:
        return Confirmation.ALREADY
    if now >= expires:
        return Confirmation.EXPIRED
    # A link confirms once: having left since, its owner signs up again for a new one.
    events = consents_of(session, subscriber.id)
    issued = [e.at for e in events if e.event == "signup"]
    confirmed = [e.at for e in events if e.event == "confirm"]
    if issued and confirmed and max(confirmed) >= max(issued):
        return Confirmation.ALREADY
    return Confirmation.CONFIRMED


def confirm(
    factory: sessionmaker[Session], key: bytes, token: str, *, origin: Origin, now: datetime
) -> tuple[Confirmation, Subscriber | None]:
    """Confirm the sign-up *token* was mailed for: the subscriber becomes ``active`` and
    the confirmation is recorded.  Confirming twice changes nothing."""
    found, subscriber = check_confirmation(factory, key, token, now)
    if found is not Confirmation.CONFIRMED or subscriber is None:
        return found, subscriber
    parts = confirm_token_parts(token)
    assert parts is not None
    with transaction(factory) as session:
        current = subscribers_by_ids(session, [subscriber.id]).get(subscriber.id)
        if current is None:
            return Confirmation.UNKNOWN, None
        after = after_confirm(current.status)
        if after is None or _state(session, current, parts[1], now) is not Confirmation.CONFIRMED:  # meanwhile
            return Confirmation.ALREADY, current
        set_status(session, subscriber.id, after, now)
        record_consent(
            session,
            subscriber.id,
            ConsentEvent("confirm", now, subscriber.email, origin.page, origin.client, origin.detail),
        )
    return Confirmation.CONFIRMED, replace(subscriber, status=after)


def expire_signups(factory: sessionmaker[Session], settings: Settings, now: datetime) -> int:
    """Delete the pending subscribers whose confirmation link has expired; how many."""
    with transaction(factory) as session:
        return delete_unconfirmed(session, now - timedelta(hours=settings.web.confirm_hours))
