"""Store: the ledger (which digest carried which entry to whom) and the digests the
planner and resends create.  SQL only; the planning rules live in ``bot.plan``."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, func, select, update
from sqlalchemy.orm import Session

from bot.domain import DigestKind, DigestState, ScheduledDay
from bot.store.bulk import CHUNK, allocate_ids, bulk_insert, chunks, insert_ignoring_conflicts
from bot.store.retention import drop_unshown_bodies
from bot.store.schema import BodyItem, Digest, LedgerEntry
from bot.store.schema import Subscriber as SubscriberRow

# entry, pinned source, why, tags, url, taste (the reader's taste score, None without a model)
ItemRow = tuple[int, int | None, str, tuple[str, ...], str, float | None]


@dataclass(frozen=True, slots=True)
class Planned:
    entry_id: int
    summary_source_id: int | None
    why: str
    tags: tuple[str, ...]
    url: str
    taste: float | None = None


def claimed_entry_ids(session: Session, subscriber_id: int) -> set[int]:
    """Entries already carried (or being carried) by a digest to this subscriber."""
    return set(
        session.scalars(
            select(LedgerEntry.entry_id)
            .join(Digest, Digest.id == LedgerEntry.digest_id)
            .where(Digest.subscriber_id == subscriber_id)
        )
    )


def claimed_from(session: Session, subscriber_ids: Sequence[int], entry_ids: Sequence[int]) -> dict[int, set[int]]:
    """Per subscriber, which of *entry_ids* (their window's entries) are claimed.

    A watermarked window is about a day of entries shared by a batch of
    subscribers: then one range of the ledger's (entry, subscriber) key per
    entry, however long the history.  A window longer than the subscribers are
    many (no watermark yet, a changed filter or tag rules) is read through the
    subscribers' digests instead: their own rows, not one look-up per entry of
    their whole backfill."""
    wanted = set(subscriber_ids)
    if len(entry_ids) > max(CHUNK, len(wanted)):
        statements = [
            select(Digest.subscriber_id, LedgerEntry.entry_id)
            .join(LedgerEntry, LedgerEntry.digest_id == Digest.id)
            .where(Digest.subscriber_id.in_(part), LedgerEntry.entry_id >= min(entry_ids))
            for part in chunks(sorted(wanted))
        ]
    else:
        statements = [
            select(LedgerEntry.subscriber_id, LedgerEntry.entry_id).where(
                LedgerEntry.entry_id.in_(part), LedgerEntry.subscriber_id.between(min(wanted), max(wanted))
            )
            for part in chunks(list(entry_ids))
        ]
    window = set(entry_ids)
    found: dict[int, set[int]] = {}
    for statement in statements:
        for subscriber_id, entry_id in session.execute(statement):
            if subscriber_id in wanted and entry_id in window:
                found.setdefault(subscriber_id, set()).add(entry_id)
    return found


@dataclass(frozen=True, slots=True)
class NewDigest:
    """A digest the planner decided on (``insert_digests`` writes it)."""

    subscriber_id: int
    local_date: date
    kind: DigestKind
    state: DigestState
    entries: Sequence[Planned]
    pending: int
    fills: int | None = None  # the empty scheduled digest of the same day this one fills
    filter: str | None = None  # the subscriber's filter it was chosen with


def body_key(rows: Iterable[ItemRow]) -> str:
    """What identifies a digest's items: their content, in order (``BodyItem``)."""
    return hashlib.blake2b(repr(tuple(rows)).encode("utf-8"), digest_size=16).hexdigest()


class _BodyKeys:
    """``body_key`` per digest of one planner batch, hashed once per distinct
    list: the subscribers of a filter share their ``Planned`` objects.  Keeps
    each distinct body's items for ``_insert_bodies``."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, ...], tuple[str, Sequence[Planned]]] = {}

    def body(self, entries: Sequence[Planned]) -> str | None:
        if not entries:
            return None
        same = tuple(map(id, entries))
        if same not in self.known:  # the entries are kept in the value, so their ids stay theirs
            self.known[same] = (
                body_key((p.entry_id, p.summary_source_id, p.why, p.tags, p.url, p.taste) for p in entries),
                entries,
            )
        return self.known[same][0]

    def bodies(self) -> dict[str, Sequence[Planned]]:
        return {key: entries for key, entries in self.known.values()}


def insert_digests(
    session: Session, digests: Sequence[NewDigest], *, now: datetime, message_id: Callable[[int, NewDigest], str]
) -> list[int]:
    """Insert planned digests, their bodies and ledger rows in bulk; their ids, in order.
    *message_id* makes each Message-ID from the digest's new id."""
    ids = list(allocate_ids(session, Digest.__table__, len(digests)))
    keys = _BodyKeys()
    bulk_insert(
        session,
        Digest.__table__,
        [
            {
                "id": digest_id,
                "subscriber_id": d.subscriber_id,
                "local_date": d.local_date,
                "kind": d.kind.value,
                "resend_of_id": None,
                "state": d.state.value,
                "attempts": 0,
                "next_attempt_at": now,
                "lease_owner": None,
                "lease_expires_at": None,
                "message_id": message_id(digest_id, d) if d.state is not DigestState.EMPTY else "",
                "entry_count": len(d.entries),
                "pending_count": d.pending,
                "smtp_code": None,
                "last_error": None,
                "planned_at": now,
                "sent_at": None,
                "body_key": keys.body(d.entries),
                "nothing_at": now if d.state is DigestState.EMPTY else None,
                "checked_at": now if d.state is DigestState.EMPTY else None,
                "filter": d.filter,
            }
            for digest_id, d in zip(ids, digests, strict=True)
        ],
    )
    _insert_bodies(session, keys.bodies())
    _insert_ledger(session, list(zip(ids, digests, strict=True)))
    return ids


def _insert_bodies(session: Session, bodies: dict[str, Sequence[Planned]]) -> None:
    """The items of each body not stored yet (an earlier batch or day may have it)."""
    stored: set[str] = set()
    for part in chunks(sorted(bodies)):
        stored.update(session.scalars(select(BodyItem.body_key).where(BodyItem.body_key.in_(part)).distinct()))
    rows = [
        {
            "body_key": key,
            "position": n,
            "entry_id": p.entry_id,
            "summary_source_id": p.summary_source_id,
            "why": p.why,
            # The same tuple for every body of a filter: encoded to JSON once (bulk_insert).
            "tags": p.tags,
            "url": p.url,
            "taste": p.taste,
        }
        for key, entries in bodies.items()
        if key not in stored
        for n, p in enumerate(entries)
    ]
    insert_ignoring_conflicts(session, BodyItem.__table__, rows)  # another planner may write one meanwhile


def _insert_ledger(session: Session, digests: Sequence[tuple[int, NewDigest]]) -> None:
    # Written a chunk at a time: a batch of 1,000 subscribers has ~30,000 rows.
    ledger = (
        {"entry_id": p.entry_id, "subscriber_id": d.subscriber_id, "digest_id": digest_id}
        for digest_id, d in digests
        for p in d.entries
    )
    while part := list(itertools.islice(ledger, 10_000)):
        bulk_insert(session, LedgerEntry.__table__, part)


def scheduled_days(
    session: Session, subscriber_ids: Sequence[int], days: Iterable[date]
) -> dict[tuple[int, date], ScheduledDay]:
    """The scheduled digest of each (subscriber, local day) pair that has one."""
    found: dict[tuple[int, date], ScheduledDay] = {}
    day_list = sorted(set(days))
    for part in chunks(list(subscriber_ids)):
        rows = session.execute(
            select(
                Digest.subscriber_id, Digest.local_date, Digest.id, Digest.state, Digest.nothing_at, Digest.checked_at
            ).where(
                Digest.kind == DigestKind.SCHEDULED.value,
                Digest.subscriber_id.in_(part),
                Digest.local_date.in_(day_list),
            )
        )
        for sid, day, digest_id, state, nothing_at, checked_at in rows:
            found[(sid, day)] = ScheduledDay(digest_id, DigestState(state), nothing_at, checked_at)
    return found


def last_scheduled_at(session: Session, subscriber_ids: Sequence[int], before: date) -> dict[int, datetime]:
    """When each subscriber's latest scheduled digest before the local day *before* was planned."""
    found: dict[int, datetime] = {}
    for part in chunks(list(subscriber_ids)):
        rows = session.execute(
            select(Digest.subscriber_id, func.max(Digest.planned_at))
            .where(
                Digest.kind == DigestKind.SCHEDULED.value,
                Digest.subscriber_id.in_(part),
                Digest.local_date < before,
            )
            .group_by(Digest.subscriber_id)
        )
        found.update((sid, at) for sid, at in rows if at is not None)
    return found


def mark_checked(session: Session, digest_ids: Sequence[int], now: datetime) -> None:
    """Empty days looked at again and still empty: remember when."""
    for part in chunks(list(digest_ids)):
        session.execute(
            update(Digest).where(Digest.id.in_(part), Digest.state == DigestState.EMPTY.value).values(checked_at=now)
        )


class DayTaken(Exception):
    """An empty day another planner filled (or a cancel changed) first."""


def fill_empty_days(
    session: Session,
    digests: Sequence[tuple[int, NewDigest]],
    *,
    now: datetime,
    message_id: Callable[[int, NewDigest], str],
) -> None:
    """Turn empty scheduled days into the digests planned for them, with their ledger rows.
    Raises ``DayTaken`` when one of them is no longer empty."""
    keys = _BodyKeys()
    for digest_id, d in digests:
        result = cast(
            CursorResult[Any],
            session.execute(
                update(Digest)
                .where(Digest.id == digest_id, Digest.state == DigestState.EMPTY.value)
                .values(
                    state=d.state.value,
                    next_attempt_at=now,
                    message_id=message_id(digest_id, d),
                    entry_count=len(d.entries),
                    pending_count=d.pending,
                    planned_at=now,
                    checked_at=now,
                    body_key=keys.body(d.entries),
                    filter=d.filter,
                )
            ),
        )
        if result.rowcount != 1:
            raise DayTaken(f"digest #{digest_id} is no longer empty")
    _insert_bodies(session, keys.bodies())
    _insert_ledger(session, digests)


def create_digest(
    session: Session,
    *,
    subscriber_id: int,
    local_date: date,
    kind: DigestKind,
    state: DigestState,
    now: datetime,
    entries: Sequence[Planned],
    message_id: str,
    resend_of: int | None = None,
    pending: int = 0,
) -> int:
    """Insert a digest and (except for resends, which show the original's) its body
    and ledger rows."""
    keys = _BodyKeys()
    digest = Digest(
        subscriber_id=subscriber_id,
        local_date=local_date,
        kind=kind.value,
        resend_of_id=resend_of,
        state=state.value,
        attempts=0,
        next_attempt_at=now,
        message_id=message_id,
        entry_count=len(entries) if kind is not DigestKind.RESEND else entry_count_of(session, resend_of),
        pending_count=pending,
        planned_at=now,
        body_key=keys.body(entries) if kind is not DigestKind.RESEND else None,
    )
    session.add(digest)
    session.flush()
    if kind is not DigestKind.RESEND:
        _insert_bodies(session, keys.bodies())
        new = NewDigest(subscriber_id, local_date, kind, state, entries, pending)
        _insert_ledger(session, [(digest.id, new)])
    return digest.id


def entry_count_of(session: Session, digest_id: int | None) -> int:
    if digest_id is None:
        return 0
    return session.scalar(select(func.count()).select_from(LedgerEntry).where(LedgerEntry.digest_id == digest_id)) or 0


def release_entries(session: Session, digest_id: int) -> None:
    """Give a cancelled digest's entries back, so a later digest can carry them
    (and drop the subscriber's planner watermark: those entries are behind it).
    The digest's body key goes too, and the body when no other digest shows it."""
    key = session.scalar(select(Digest.body_key).where(Digest.id == digest_id))
    session.execute(delete(LedgerEntry).where(LedgerEntry.digest_id == digest_id))
    session.execute(update(Digest).where(Digest.id == digest_id).values(body_key=None))
    if key is not None:
        drop_unshown_bodies(session, [key])
    session.execute(
        update(SubscriberRow)
        .where(SubscriberRow.id == select(Digest.subscriber_id).where(Digest.id == digest_id).scalar_subquery())
        .values(planned_through=None, planned_key=None)
    )
