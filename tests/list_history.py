"""A store with 90 days of a list's life, written in bulk and seeded: readers of every
status, digests sent and failed, unsubscribes, complaints, ratings, and entries from a
dump folder and from feeds.  ``fill_history`` returns what it wrote, for the tests of
``digestbot stats --html`` to compare the picture with (and ``bench/screens.py`` to
draw it)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.store.bulk import allocate_ids, bulk_insert
from bot.store.engine import transaction
from bot.store.response_tables import Consent, ReturnEventRow
from bot.store.schema import Digest, Entry, Source, SubscriberRow
from bot.store.taste_tables import Feedback

FEEDS = (
    "https://export.arxiv.org/rss/cs.AR",
    'https://example.org/feeds/<hardware> & "more".xml',  # every label is escaped
    *(f"https://feeds{n}.example.net/papers/atom" for n in range(6)),
)
STATUSES = {"active": 120, "paused": 7, "unsubscribed": 23, "bounced": 4, "pending": 3}


@dataclass
class Written:
    """What ``fill_history`` wrote, counted as the picture must count it."""

    statuses: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    failed: int = 0
    bounced: int = 0  # failed digests of readers now bounced
    unsubscribes: int = 0
    complaints: int = 0
    more: int = 0
    less: int = 0
    entries: dict[str, int] = field(default_factory=dict)  # by feed URL, or "file"
    sent_by_day: dict[date, int] = field(default_factory=dict)


def _at(day: date, hour: int) -> datetime:
    return datetime.combine(day, time(hour), tzinfo=UTC)


def fill_history(factory: sessionmaker[Session], today: date, *, days: int = 90, seed: int = 7) -> Written:
    rng = random.Random(seed)
    written = Written(statuses=dict(STATUSES))
    run = [today - timedelta(days=n) for n in range(days - 1, -1, -1)]
    with transaction(factory) as session:
        readers = _readers(session, run[0])
        by_status = {status: [r for r, s in readers if s == status] for status in STATUSES}
        sources = _sources(session, run)
        entry_ids = _entries(session, rng, run, sources, written)
        _digests(session, rng, run, by_status, written)
        _leaving(session, rng, run, by_status, written)
        _ratings(session, rng, by_status["active"], entry_ids, today, written)
    return written


def _readers(session: Session, first: date) -> list[tuple[int, str]]:
    statuses = [status for status, count in STATUSES.items() for _ in range(count)]
    ids = list(allocate_ids(session, SubscriberRow.__table__, len(statuses)))
    at = _at(first, 0)
    rows = [
        {
            "id": sid,
            "email": f"reader{sid}@example.org",
            "email_key": f"reader{sid}@example.org",
            "name": f"Reader {sid}",
            "filter": "*",
            "timezone": "UTC",
            "send_hour": 6,
            "status": status,
            "backfill": "7d",
            "unsubscribe_secret": f"s{sid:031d}",
            "bounces": 0,
            "created_at": at,
            "updated_at": at,
        }
        for sid, status in zip(ids, statuses, strict=True)
    ]
    bulk_insert(session, SubscriberRow.__table__, rows)
    return list(zip(ids, statuses, strict=True))


def _sources(session: Session, run: list[date]) -> dict[str, list[int]]:
    """A dump file a day, and each feed's documents on some days: source ids by feed."""
    rows, by_feed = [], {}
    ids = iter(allocate_ids(session, Source.__table__, len(run) * (1 + len(FEEDS))))
    for day in run:
        for origin, path in [("file", f"/var/dumps/{day}.txt"), *(("url", feed) for feed in FEEDS)]:
            sid = next(ids)
            by_feed.setdefault(path if origin == "url" else "file", []).append(sid)
            rows.append(
                {
                    "id": sid,
                    "origin": origin,
                    "path": path,
                    "sha256": f"{sid:064d}",
                    "size": 1000,
                    "mtime_ns": None,
                    "format": "dump" if origin == "file" else "rss",
                    "status": "ingested",
                    "error": None,
                    "entries_count": 0,
                    "new_count": 0,
                    "updated_count": 0,
                    "duplicate_of_id": None,
                    "ingested_at": _at(day, 5),
                }
            )
    bulk_insert(session, Source.__table__, rows)
    return by_feed


def _entries(
    session: Session, rng: random.Random, run: list[date], sources: dict[str, list[int]], written: Written
) -> list[int]:
    weights = {"file": 40, **{feed: max(1, 12 - 2 * n) for n, feed in enumerate(FEEDS)}}
    plan = []
    for n, day in enumerate(run):
        for name, mean in weights.items():
            count = max(0, int(rng.gauss(mean, mean / 4)))
            plan += [(day, name, sources[name][n])] * count
            written.entries[name] = written.entries.get(name, 0) + count
    ids = list(allocate_ids(session, Entry.__table__, len(plan)))
    rows = [
        {
            "id": eid,
            "key": f"history:{eid}",
            "kind": "paper",
            "title": f"Paper {eid}",
            "title_norm": f"paper {eid}",
            "title_hash": None,
            "authors": ["A. Author"],
            "published": day,
            "summary": "Text.",
            "summary_type": "text/plain",
            "summary_source_id": source_id,
            "links": [],
            "arxiv_id": None,
            "doi": None,
            "extra": {},
            "first_seen_source_id": source_id,
            "first_seen_at": _at(day, 5),
            "updated_at": _at(day, 5),
            "revised_at": None,
            "revision_note": None,
            "linked_at": None,
        }
        for eid, (day, _, source_id) in zip(ids, plan, strict=True)
    ]
    bulk_insert(session, Entry.__table__, rows)
    return ids


def _digests(
    session: Session, rng: random.Random, run: list[date], by_status: dict[str, list[int]], written: Written
) -> None:
    rows = []
    for day in run:
        getting = by_status["active"][: rng.randint(80, 120)]
        failing = set(rng.sample(getting, rng.randint(0, 3)))
        rows += [(sid, day, "failed" if sid in failing else "sent") for sid in getting]
        rows += [(sid, day, "failed") for sid in rng.sample(by_status["bounced"], rng.randint(0, 2))]
    ids = list(allocate_ids(session, Digest.__table__, len(rows)))
    values = []
    for did, (sid, day, state) in zip(ids, rows, strict=True):
        if state == "sent":
            written.sent += 1
            written.sent_by_day[day] = written.sent_by_day.get(day, 0) + 1
        else:
            written.failed += 1
            written.bounced += sid in by_status["bounced"]
        values.append(
            {
                "id": did,
                "subscriber_id": sid,
                "local_date": day,
                "kind": "scheduled",
                "resend_of_id": None,
                "state": state,
                "attempts": 1,
                "next_attempt_at": _at(day, 6),
                "lease_owner": None,
                "lease_expires_at": None,
                "message_id": f"<digest.{did}.history@example.org>",
                "entry_count": 5,
                "pending_count": 0,
                "smtp_code": 250 if state == "sent" else 550,
                "last_error": None if state == "sent" else "550 5.1.1 User unknown",
                "planned_at": _at(day, 5),
                "sent_at": _at(day, 6) if state == "sent" else None,
                "body_key": None,
            }
        )
    bulk_insert(session, Digest.__table__, values)


def _leaving(
    session: Session, rng: random.Random, run: list[date], by_status: dict[str, list[int]], written: Written
) -> None:
    left = by_status["unsubscribed"]
    days = sorted(rng.choices(run, k=len(left)))
    consents = []
    for sid, day in zip(left, days, strict=True):
        consents.append(
            {"subscriber_id": sid, "event": "unsubscribe", "at": _at(day, 9), "address": f"reader{sid}@example.org"}
            | {"page": "the one-click unsubscribe link", "client": "", "detail": ""}
        )
    bulk_insert(session, Consent.__table__, consents)
    written.unsubscribes = len(consents)
    complaints = [
        {"message_key": f"complaint-{sid}", "at": _at(day, 10), "subscriber_id": sid, "digest_id": None}
        | {"kind": "complaint", "address": f"reader{sid}@example.org", "status": "", "diagnostic": "abuse"}
        for sid, day in zip(left[:5], days[:5], strict=True)
    ]
    bulk_insert(session, ReturnEventRow.__table__, complaints)
    written.complaints = len(complaints)


def _ratings(
    session: Session, rng: random.Random, readers: list[int], entry_ids: list[int], today: date, written: Written
) -> None:
    rows = []
    for sid in readers[:40]:
        for entry_id in rng.sample(entry_ids, 6):
            verdict = rng.choice(("more", "more", "less"))
            day = today - timedelta(days=rng.randint(0, 60))
            rows.append({"subscriber_id": sid, "entry_id": entry_id, "verdict": verdict, "at": _at(day, 12)})
            written.more += verdict == "more"
            written.less += verdict == "less"
    rows = [row | {"section": ""} for row in rows]
    bulk_insert(session, Feedback.__table__, rows)
