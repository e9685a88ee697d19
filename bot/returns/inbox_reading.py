"""Returned mail, the service: read the inbox, record what each message did, and only
then mark it processed.

Each message is classified (``classify``), matched to the subscriber it names (a
signed VERP return path, else a signed token, else for a bounce or complaint an
address we mail), recorded once under its SHA-256 in one transaction with the status
change ``rules`` gives, and marked Seen after that commit.  A crash between the two
reads the message again next time, finds it recorded and only marks it.  An
unsubscribe mail counts only with a valid token: its From address proves nothing.
Never renders or sends, and never deletes a message.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import ConsentEvent, Returned, ReturnEvent, ReturnKind, Subscriber, SubscriberStatus
from bot.domain.statuses import BounceLimits, after_return, consent_change
from bot.returns.classify import Addresses, classify
from bot.returns.mailboxes import Mailbox, open_mailbox
from bot.store.consents import record_consent
from bot.store.engine import transaction
from bot.store.returns import count_since_cleared, digest_subscriber, is_recorded, record_return, recorded_kind
from bot.store.subscribers import get_subscriber, set_status, subscribers_by_ids
from bot.tokens import token_is_valid, token_subscriber_id

# Where an unsubscribe read from the inbox was asked, as the consent record says it.
BY_MAIL = "an unsubscribe mail (List-Unsubscribe's mailto)"

log = logging.getLogger(__name__)


@dataclass
class InboxReport:
    """What one reading of the inbox did."""

    read: int = 0
    kinds: dict[ReturnKind, int] = field(default_factory=dict)  # recorded now, by kind
    unknown: int = 0  # recorded, naming nobody we mail
    repeated: int = 0  # recorded before (a crash came between the commit and the mark)
    left: int = 0  # left for a person
    changed: list[tuple[str, SubscriberStatus]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class InboxSetup:
    """What the service needs besides the store and the mailbox."""

    key: bytes
    addresses: Addresses
    limits: BounceLimits
    soft_days: int


def reading_of(settings: Settings, key: bytes) -> InboxSetup:
    sender = settings.sender
    return InboxSetup(
        key=key,
        addresses=Addresses(key, sender.bounce_address, sender.unsubscribe_address or sender.from_address),
        limits=BounceLimits(settings.smtp.bounce_threshold, settings.inbox.soft_bounce_limit),
        soft_days=settings.inbox.soft_bounce_days,
    )


def read_inbox(
    factory: sessionmaker[Session], mailbox: Mailbox, reading: InboxSetup, now: datetime | None = None
) -> InboxReport:
    """Process every unprocessed message of *mailbox*.  ``MailboxError`` when the mailbox
    fails midway: what was committed stays committed, the rest waits for the next time."""
    report = InboxReport()
    for ref, raw in mailbox.messages():
        report.read += 1
        if raw is None:  # bigger than inbox.max_message_bytes: not read at all
            mailbox.leave(ref)
            report.left += 1
            continue
        key = hashlib.sha256(raw).hexdigest()
        with factory() as session:
            before = recorded_kind(session, key)
        if before is ReturnKind.OTHER:  # read before and left for a person: never classified twice
            mailbox.leave(ref)
            report.left += 1
            continue
        returned = classify(raw, reading.addresses) if before is None else Returned(before)
        if returned.kind is ReturnKind.OTHER:
            _remember_other(factory, key, returned, now or datetime.now(UTC))
            mailbox.leave(ref)
            report.left += 1
            continue
        try:
            with transaction(factory) as session:
                handled = _record(session, returned, key, reading, now or datetime.now(UTC), report)
        except IntegrityError:  # another reader recorded the same message a moment ago
            report.repeated += 1
            handled = True
        if handled:
            mailbox.done(ref)
        else:
            nobody = Returned(ReturnKind.OTHER, diagnostic="an unsubscribe mail whose token names nobody")
            _remember_other(factory, key, nobody, now or datetime.now(UTC))
            mailbox.leave(ref)
            report.left += 1
    return report


def _remember_other(factory: sessionmaker[Session], message_key: str, returned: Returned, now: datetime) -> None:
    """Record that a message is for a person, so that later readings of the inbox skip it."""
    event = ReturnEvent(now, ReturnKind.OTHER, "", "", returned.diagnostic, None)
    try:
        with transaction(factory) as session:
            record_return(session, message_key, None, event)
    except IntegrityError:
        pass  # another reader recorded it a moment ago


def _record(
    session: Session, returned: Returned, message_key: str, reading: InboxSetup, now: datetime, report: InboxReport
) -> bool:
    """Record one message's outcome; False when it is for a person after all (an
    unsubscribe mail whose token is nobody's: nothing is recorded)."""
    if is_recorded(session, message_key):
        report.repeated += 1
        return True
    subscriber, digest_id = _named(session, returned, reading.key)
    if subscriber is None and returned.kind is ReturnKind.UNSUBSCRIBE:
        return False
    shown = subscriber.email if subscriber else (returned.addresses[0] if returned.addresses else "")
    event = ReturnEvent(now, returned.kind, shown, returned.status, returned.diagnostic, digest_id)
    record_return(session, message_key, subscriber.id if subscriber else None, event)
    report.kinds[returned.kind] = report.kinds.get(returned.kind, 0) + 1
    if subscriber is None:
        report.unknown += 1
        log.info("%s for %s: not a subscriber (recorded)", returned.kind.value, shown or "no address")
        return True
    since = now - timedelta(days=reading.soft_days) if returned.kind is ReturnKind.SOFT else None
    count = count_since_cleared(session, subscriber.id, returned.kind, since)
    status = after_return(returned.kind, subscriber.status, count, reading.limits)
    if status is not None:
        set_status(session, subscriber.id, status, now)
        if consent_change(subscriber.status, status) is not None:
            sender = f"from {', '.join(returned.addresses)}" if returned.addresses else ""
            record_consent(
                session, subscriber.id, ConsentEvent("unsubscribe", now, subscriber.email, BY_MAIL, "", sender)
            )
        report.changed.append((subscriber.email, status))
        why = " ".join(part for part in (returned.kind.value, returned.status) if part)
        log.info("%s is now %s: %s", subscriber.email, status.value, why)
    return True


def _named(session: Session, returned: Returned, key: bytes) -> tuple[Subscriber | None, int | None]:
    """The subscriber (and digest) a returned message names: its VERP digest, else its
    token, else (not for unsubscribe mails) the first address that is a subscriber's."""
    if returned.digest_id is not None:
        subscriber_id = digest_subscriber(session, returned.digest_id)
        if subscriber_id is not None:
            return subscribers_by_ids(session, [subscriber_id]).get(subscriber_id), returned.digest_id
    if returned.token is not None and (subscriber_id := token_subscriber_id(returned.token)) is not None:
        found = subscribers_by_ids(session, [subscriber_id]).get(subscriber_id)
        if found is not None and token_is_valid(key, returned.token, found.id, found.unsubscribe_secret):
            return found, None
    if returned.kind is ReturnKind.UNSUBSCRIBE:
        return None, None
    for address in returned.addresses:
        found = get_subscriber(session, address)
        if found is not None:
            return found, None
    return None, None


def read_configured_inbox(factory: sessionmaker[Session], settings: Settings, key: bytes) -> InboxReport:
    """Open ``inbox.url``, process it, close it (``MailboxError`` when it fails)."""
    mailbox = open_mailbox(settings.inbox)
    try:
        return read_inbox(factory, mailbox, reading_of(settings, key))
    finally:
        mailbox.close()
