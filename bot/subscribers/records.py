"""Subscribers: one reader's whole record as an operator looks at it (``subscribers
show``): their last digests, how they consented, the mail that came back, and what
their ranking learns from.  Reads the store; never writes it."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from bot.domain import ConsentEvent, ReturnEvent, Subscriber
from bot.store.consents import consents_of
from bot.store.digests import DigestRow, list_digests
from bot.store.returns import returns_of
from bot.taste.library_service import TasteSummary, taste_summary

LAST_DIGESTS = 10


@dataclass(frozen=True, slots=True)
class SubscriberRecord:
    digests: list[DigestRow]  # the last LAST_DIGESTS, newest first
    consents: list[ConsentEvent]
    returned: list[ReturnEvent]
    taste: TasteSummary


def subscriber_record(factory: sessionmaker[Session], subscriber: Subscriber) -> SubscriberRecord:
    with factory() as session:
        digests = list_digests(session, subscriber_id=subscriber.id, limit=LAST_DIGESTS)
        consents = consents_of(session, subscriber.id)
        returned = returns_of(session, subscriber.id)
    return SubscriberRecord(list(digests), list(consents), list(returned), taste_summary(factory, subscriber))
