"""Preview service: the message a subscriber's next digest would be, made by the real
planner and mailer inside a database transaction that is then rolled back.

The bytes are the sender's, but for Date and Message-ID (the digest id the
rolled-back plan drew).  Never commits: every write goes through a session on
one connection whose outer transaction is always rolled back, and the
unsubscribe journal is only read.  On SQLite that transaction holds the
store's write lock for the moment the preview takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.select import local_send_time, select_for
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.domain import DigestKind, Subscriber, SubscriberStatus
from bot.mail.mailer import Mailer
from bot.plan.cadence import next_send_day, sends_on
from bot.plan.days import DayFacts, closes_at, local_time, local_today, today_note
from bot.plan.planner import plan_without_journal
from bot.plan.resend import find_scheduled
from bot.store.digests import get_digest
from bot.store.ledger import claimed_entry_ids
from bot.unsubscribes import journal_of


@dataclass(frozen=True, slots=True)
class NextMessage:
    day: date  # the subscriber's local day it is planned for
    send_at: datetime  # UTC
    entries: int
    data: bytes  # the message, as the sender would put it on the wire


@contextmanager
def _rolled_back(factory: sessionmaker[Session]) -> Iterator[sessionmaker[Session]]:
    """Sessions whose commits are savepoints of one transaction rolled back at the end."""
    with factory.kw["bind"].connect() as connection:
        outer = connection.begin()
        try:
            yield sessionmaker(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
        finally:
            outer.rollback()


def next_day(factory: sessionmaker[Session], subscriber: Subscriber, now: datetime) -> date:
    """The local day of the subscriber's next scheduled digest: today, unless today's
    is already planned or their cadence does not send today."""
    today = local_today(subscriber.timezone, now)
    first = next_send_day(subscriber.cadence, today)
    if first == today and find_scheduled(factory, subscriber.id, today) is not None:
        first = next_send_day(subscriber.cadence, today + timedelta(days=1))
    return first


def next_message(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    subscriber: Subscriber,
    *,
    day: date,
    now: datetime,
) -> NextMessage | None:
    """The scheduled digest of *day*, planned and built at its send time (or *now*, when
    that has passed: the planner's next pass); None when nothing would be sent
    (nothing new, or a digest for that day exists)."""
    send_at = max(local_send_time(subscriber, day), now)
    leaving = journal_of(factory).pending_subscribers([subscriber.id])
    active = subscriber if subscriber.status is SubscriberStatus.ACTIVE else None
    with _rolled_back(factory) as scratch:
        report = plan_without_journal(
            scratch,
            settings,
            rules,
            now=send_at,
            all_due=True,
            subscribers=[active] if active else [],
            kind=DigestKind.SCHEDULED,
            leaving=leaving,
        )
        if not report.planned:
            return None
        mailer = Mailer(settings)
        try:
            with scratch() as session:
                row = get_digest(session, next(iter(report.planned)))
                assert row is not None
                (built,) = mailer.build(session, [row], send_at)
        finally:
            mailer.close()
    if built.error or not isinstance(built.data, bytes):
        raise RuntimeError(built.error or "the message was not built")
    return NextMessage(day, send_at, row.entry_count, built.data)


@dataclass(frozen=True, slots=True)
class DayLine:
    email: str
    send_at: datetime
    entries: int  # what would go out
    held_back: int  # matching entries beyond digest.max_entries, for the next day


def day_table(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    subscribers: list[Subscriber],
    day: date,
    now: datetime,
) -> list[DayLine]:
    """What each active subscriber's scheduled digest of *day* would hold (those whose
    cadence sends that day), as of its
    send time (or *now*, when that has passed), with what the store holds now
    (nothing is planned or written)."""
    cap = settings.digest.max_entries
    lines = []
    with factory() as session:
        for subscriber in subscribers:
            if subscriber.status is not SubscriberStatus.ACTIVE or not sends_on(subscriber.cadence, day):
                continue
            send_at = max(local_send_time(subscriber, day), now)
            found = select_for(
                session, subscriber, rules, as_of=send_at, exclude=claimed_entry_ids(session, subscriber.id)
            )
            lines.append(DayLine(subscriber.email, send_at, min(len(found), cap), max(0, len(found) - cap)))
    return lines


def when_note(factory: sessionmaker[Session], settings: Settings, subscriber: Subscriber, at: datetime) -> str:
    """When what ``preview`` lists for *subscriber* would go out (``days.today_note``),
    given their cadence and today's scheduled digest."""
    tz = subscriber.timezone
    today = local_today(tz, at)
    row = find_scheduled(factory, subscriber.id, today)
    facts = (
        None if row is None else DayFacts(today, row.state, row.planned_at, row.sent_at, row.nothing_at, row.arrived)
    )
    sends_today = sends_on(subscriber.cadence, today)
    day = today if sends_today and row is None else next_send_day(subscriber.cadence, today + timedelta(days=1))
    closes = closes_at(today, send_hour=subscriber.send_hour, close_hour=settings.schedule.day_closes_hour, timezone=tz)
    send_at = local_time(day, subscriber.send_hour, tz)
    return today_note(facts, timezone=tz, send_at=send_at, closes_at=closes, now=at, sends_today=sends_today)
