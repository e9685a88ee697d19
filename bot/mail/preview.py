"""Mail stage: the message a subscriber's next digest would be, made by the real
planner and mailer inside a database transaction that is then rolled back.

The bytes are the sender's, but for Date and Message-ID (the digest id the
rolled-back plan drew).  Which day that is, and what it would hold, is
``bot.plan.next_digest``'s to say.  Never commits: every write goes through a session on
one connection whose outer transaction is always rolled back, and the
unsubscribe journal is only read.  On SQLite that transaction holds the
store's write lock for the moment the preview takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.candidates import local_send_time
from bot.domain import DigestKind, Subscriber, SubscriberStatus
from bot.mail.mailer import Mailer
from bot.mail.parts import Parts
from bot.plan.planner import plan_without_journal
from bot.store.digests import get_digest
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


def next_message(
    factory: sessionmaker[Session],
    parts: Parts,
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
            parts.settings,
            parts.rules,
            now=send_at,
            all_due=True,
            subscribers=[active] if active else [],
            kind=DigestKind.SCHEDULED,
            leaving=leaving,
        )
        if not report.planned:
            return None
        with scratch() as session:
            row = get_digest(session, next(iter(report.planned)))
            assert row is not None
            (built,) = Mailer(parts).build(session, [row], send_at)
    if built.error or not isinstance(built.data, bytes):
        raise RuntimeError(built.error or "the message was not built")
    return NextMessage(day, send_at, row.entry_count, built.data)
