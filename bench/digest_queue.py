"""Queue many digests in bulk (for the multi-worker test and benchmark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from bot.ingest import ingest_bytes
from bot.store.engine import transaction
from bot.store.entries import allocate_ids, bulk_insert
from bot.store.schema import Digest, LedgerEntry, Subscriber

DUMP = "A Paper Everyone Gets\n\nA. Author 2026-06-14\n\nSparse attention on a GPU.\n\nPDF"


def queue_digests(factory: sessionmaker[Session], count: int, *, first: int = 0) -> None:
    """*count* subscribers, each with one queued digest carrying one entry (set up in bulk)."""
    now = datetime.now(UTC)
    ingest_bytes(factory, DUMP.encode(), name=f"scale-{first}", now=now)
    with transaction(factory) as session:
        entry_id = session.execute(text("SELECT min(id) FROM entries")).scalar_one()
        sub_ids = list(allocate_ids(session, Subscriber.__table__, count))
        bulk_insert(session, Subscriber.__table__, [
            {"id": sid, "email": f"reader{first + n}@example.org", "email_key": f"reader{first + n}@example.org",
             "name": f"Reader {first + n}", "filter": "*", "timezone": "UTC", "send_hour": 0, "status": "active",
             "backfill": "all", "unsubscribe_secret": f"s{sid:032d}"[:32], "bounces": 0, "created_at": now,
             "updated_at": now}
            for n, sid in enumerate(sub_ids)
        ])
        digest_ids = list(allocate_ids(session, Digest.__table__, count))
        bulk_insert(session, Digest.__table__, [
            {"id": did, "subscriber_id": sid, "local_date": now.date(), "kind": "manual", "resend_of_id": None,
             "state": "queued", "attempts": 0, "next_attempt_at": now - timedelta(minutes=1), "lease_owner": None,
             "lease_expires_at": None, "message_id": f"<digest.{did}.scale@example.org>", "entry_count": 1,
             "pending_count": 0, "smtp_code": None, "last_error": None, "planned_at": now, "sent_at": None}
            for did, sid in zip(digest_ids, sub_ids, strict=True)
        ])
        bulk_insert(session, LedgerEntry.__table__, [
            {"subscriber_id": sid, "entry_id": entry_id, "digest_id": did, "position": 0, "summary_source_id": None,
             "why": "matches everything", "tags": [], "url": "https://example.org/paper"}
            for did, sid in zip(digest_ids, sub_ids, strict=True)
        ])


