"""Revised entries (arXiv ``replace``) that subscribers received before: which to tell
whom, pinned in the digest that tells them and marked told in the ledger.  SQL only."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import and_, bindparam, func, select, update
from sqlalchemy.orm import Session, aliased

from bot.domain import DigestState
from bot.store.bulk import chunks
from bot.store.schema import Digest, Entry, LedgerEntry
from bot.store.schema import Subscriber as SubscriberRow

# Revisions older than this are not told any more (a subscriber away a month).
HORIZON = timedelta(days=30)
# At most this many in one digest; the rest wait for the next.
PER_DIGEST = 10


def attach_revisions(session: Session, digests: Sequence[tuple[int, int]], now: datetime) -> None:
    """For each (digest id, subscriber id) of digests just planned: the entries that
    subscriber was sent earlier and that were revised since (and not yet told them),
    written into the digest (``digests.updates``) and marked told (``ledger.reported_at``)."""
    digest_of = {subscriber_id: digest_id for digest_id, subscriber_id in digests}
    if not digest_of:
        return
    found: dict[int, list[tuple[int, dict[str, str]]]] = {}
    earlier = aliased(Digest)
    for part in chunks(sorted(digest_of)):
        query = (
            select(LedgerEntry.subscriber_id, Entry.id, Entry.title, Entry.revision_note, LedgerEntry.url)
            .join(Entry, Entry.id == LedgerEntry.entry_id)
            .join(earlier, earlier.id == LedgerEntry.digest_id)
            .join(SubscriberRow, SubscriberRow.id == LedgerEntry.subscriber_id)
            .where(
                Entry.revised_at > now - HORIZON,
                LedgerEntry.subscriber_id.in_(part),
                SubscriberRow.send_updates.is_(True),
                earlier.state == DigestState.SENT.value,
                Entry.revised_at > func.coalesce(LedgerEntry.reported_at, earlier.planned_at),
            )
            .order_by(LedgerEntry.subscriber_id, Entry.revised_at, Entry.id)
        )
        for subscriber_id, entry_id, title, note, url in session.execute(query):
            told = found.setdefault(subscriber_id, [])
            if len(told) < PER_DIGEST:
                told.append((entry_id, {"title": title, "note": note or "revised", "url": url}))
    if not found:
        return
    session.connection().execute(
        update(Digest.__table__).where(Digest.__table__.c.id == bindparam("did")).values(updates=bindparam("shown")),
        [{"did": digest_of[sid], "shown": [shown for _, shown in told]} for sid, told in found.items()],
    )
    ledger = LedgerEntry.__table__
    session.connection().execute(
        update(ledger)
        .where(and_(ledger.c.subscriber_id == bindparam("sid"), ledger.c.entry_id == bindparam("eid")))
        .values(reported_at=now),
        [{"sid": sid, "eid": entry_id} for sid, told in found.items() for entry_id, _ in told],
    )
