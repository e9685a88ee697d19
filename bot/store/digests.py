"""Digests and the ledger: planning rows, claiming due work, recording outcomes."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.store.schema import LedgerEntry


def claimed_entry_ids(session: Session, subscriber_id: int) -> set[int]:
    """Entries already carried (or being carried) by a digest to this subscriber."""
    return set(session.scalars(select(LedgerEntry.entry_id).where(LedgerEntry.subscriber_id == subscriber_id)))
