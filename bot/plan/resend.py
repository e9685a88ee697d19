"""Plan stage: manual resends.

A resend queues a copy of a digest, linked to its original, and never touches
the ledger.  Never renders, never sends.
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import DigestKind, DigestState, SubscriberStatus
from bot.domain.statuses import after_unsubscribe
from bot.plan.message_ids import message_id_for
from bot.store.digests import (
    DigestRow,
    get_digest,
    list_digests,
    lock_digest,
    pending_resend_of,
    set_message_id,
    without_resend,
)
from bot.store.engine import transaction
from bot.store.ledger import create_digest
from bot.store.retention import removed
from bot.store.subscribers import subscriber_statuses
from bot.unsubscribes import journal_of


class DigestNotFound(LookupError):
    pass


class ResendPending(ValueError):
    """A resend of this digest is already on its way."""


class ReaderNotActive(ValueError):
    """The digest's reader is not active (unsubscribed, paused, bounced, or leaving by a
    one-click not applied yet): a resend would only be cancelled, so none is queued."""


def _removed_note(session: Session) -> str:
    gone = removed(session)
    if gone is None:
        return ""
    return f" (digests planned before {gone.before:%Y-%m-%d} are no longer kept: database.keep_days)"


def resend(factory: sessionmaker[Session], settings: Settings, digest_id: int, *, now: datetime) -> int:
    """Queue a copy of a digest: same entries and pinned summaries, a new
    Message-ID, recorded as a resend of the original; the ledger is not touched.
    A digest with a resend still on its way gets no second one."""
    with transaction(factory) as session:
        original = get_digest(session, digest_id)
        shows_nothing = original is not None and original.kind is DigestKind.RESEND and original.resend_of is None
        if original is None or original.state is DigestState.EMPTY or shows_nothing:
            raise DigestNotFound(f"no digest #{digest_id} with entries{_removed_note(session)}")
        status = subscriber_statuses(session, [original.subscriber_id]).get(original.subscriber_id)
        if status is not None and journal_of(factory).pending_subscribers([original.subscriber_id]):
            status = after_unsubscribe(status) or status
        if status is not SubscriberStatus.ACTIVE:
            said = status.value if status is not None else "gone"
            raise ReaderNotActive(f"{original.subscriber_email} is {said}: nothing sent")
        source = original.resend_of if original.kind is DigestKind.RESEND and original.resend_of else original.id
        lock_digest(session, source)  # two resends at once must not both pass the check below
        pending = pending_resend_of(session, source)
        if pending is not None:
            raise ResendPending(f"digest #{source} already has resend #{pending} on its way")
        new_id = create_digest(
            session,
            subscriber_id=original.subscriber_id,
            local_date=original.local_date,
            kind=DigestKind.RESEND,
            state=DigestState.QUEUED,
            now=now,
            entries=[],
            message_id="",
            resend_of=source,
        )
        set_message_id(
            session,
            new_id,
            message_id_for(new_id, original.subscriber_id, original.local_date, "resend", settings.sender),
        )
        return new_id


def resend_all(factory: sessionmaker[Session], settings: Settings, state: DigestState, *, now: datetime) -> list[int]:
    """One resend for each digest in *state* (failed, or unknown) that no resend has
    delivered or is delivering (failed resends are not resent themselves: their original
    is); run twice, it queues nothing the second time while the first run's resends are
    on their way or delivered."""
    with factory() as session:
        targets = without_resend(session, state)
    queued = []
    for digest_id in targets:
        try:
            queued.append(resend(factory, settings, digest_id, now=now))
        except (ResendPending, ReaderNotActive):  # queued meanwhile, or nobody to send it to
            continue
    return queued


def find_scheduled(factory: sessionmaker[Session], subscriber_id: int, day: date) -> DigestRow | None:
    with factory() as session:
        rows = list_digests(session, subscriber_id=subscriber_id, local_date=day, kind=DigestKind.SCHEDULED)
    return rows[0] if rows else None
