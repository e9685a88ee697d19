"""Shared by the returned-mail tests: the fixtures' deployment (their VERP addresses and
token were made with KEY), its subscribers and digests, and a Maildir to deliver to."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import SubscriberStatus
from bot.store.bulk import bulk_insert
from bot.store.engine import transaction
from bot.store.schema import Digest, SubscriberRow
from tests.helpers import digest_row

RETURNS = Path(__file__).resolve().parent / "fixtures" / "returns"
KEY = b"fixture-signing-key-0123456789"
BOUNCES = "bounces@lab.example.org"
UNSUBSCRIBE = "unsubscribe@lab.example.org"
# The fixtures' people: id -> address; digest 42 went to Ada (7), digest 43 to Grace (8).
PEOPLE = {7: "ada@example.com", 8: "grace@example.edu", 9: "carol@example.org", 10: "bob@example.net"}
ADA_SECRET = "fixture-secret"  # Ada's token in the fixtures: 7.eIestZEUXT7FklUCuvHwQx-x
_numbers = itertools.count()


def inbox_settings(maildir: Path, **inbox: object) -> Settings:
    return Settings.model_validate(
        {
            "sender": {
                "from_address": "digest@lab.example.org",
                "bounce_address": BOUNCES,
                "unsubscribe_address": UNSUBSCRIBE,
            },
            "inbox": {"url": f"maildir://{maildir}", **inbox},
        }
    )


def add_people(factory: sessionmaker[Session]) -> None:
    now = datetime(2026, 11, 24, 7, tzinfo=UTC)
    with transaction(factory) as session:
        bulk_insert(
            session,
            SubscriberRow.__table__,
            [
                {
                    "id": sid,
                    "email": email,
                    "email_key": email,
                    "name": email.split("@")[0].title(),
                    "filter": "*",
                    "timezone": "UTC",
                    "send_hour": 8,
                    "status": "active",
                    "backfill": "all",
                    "unsubscribe_secret": ADA_SECRET if sid == 7 else f"secret-{sid}",
                    "bounces": 0,
                    "created_at": now,
                    "updated_at": now,
                }
                for sid, email in PEOPLE.items()
            ],
        )
        rows = [digest_row(did, sid, now, entry_count=1) for did, sid in ((42, 7), (43, 8))]
        bulk_insert(session, Digest.__table__, rows)


def statuses(factory: sessionmaker[Session]) -> dict[str, SubscriberStatus]:
    with factory() as session:
        return {e: SubscriberStatus(s) for e, s in session.execute(select(SubscriberRow.email, SubscriberRow.status))}


def new_maildir(path: Path) -> Path:
    for sub in ("cur", "new", "tmp"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


def deliver(maildir: Path, fixture: str | bytes) -> Path:
    """Put a message into ``new/`` as an MDA would (a fixture's name, or bytes)."""
    data = fixture if isinstance(fixture, bytes) else (RETURNS / fixture).read_bytes()
    target = maildir / "new" / f"1764000000.M{next(_numbers)}P1.mx.lab.example.org"
    target.write_bytes(data)
    return target


def seen(maildir: Path) -> list[str]:
    return sorted(p.name for p in (maildir / "cur").iterdir() if p.name.partition(":")[2].startswith("2,"))
