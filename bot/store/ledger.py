"""Store: the ledger (which digest carried which entry to whom) and the digests the
planner and resends create (read back in ``claims``).  SQL only; the planning rules
live in ``bot.plan``.

The ledger is the digests' bodies: a digest with a ``body_key`` claims its body's
entries for its subscriber (``BodyItem``).  No table holds a row per (entry,
subscriber), so nothing in the database refuses a second claim: the planner locks
the subscribers it writes for (``lock_subscribers``) and checks, before it commits,
that no entry it writes is another digest's for the same subscriber
(``refuse_double_claims``)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, cast

from sqlalchemy import CursorResult, func, select, update
from sqlalchemy.orm import Session

from bot.domain import DigestKind, DigestState, ScheduledDay
from bot.store.bulk import allocate_ids, among, bulk_insert, chunks, insert_ignoring_conflicts
from bot.store.retention import drop_unshown_bodies
from bot.store.schema import BodyItem, Digest, SubscriberRow

# entry, pinned source, why, tags, url, taste (the reader's taste score, None without a
# model), section (the reader's interest it is shown under; None for one interest)
ItemRow = tuple[int, int | None, str, tuple[str, ...], str, float | None, str | None]


@dataclass(frozen=True, slots=True)
class Planned:
    entry_id: int
    summary_source_id: int | None
    why: str
    tags: tuple[str, ...]
    url: str
    taste: float | None = None
    section: str | None = None  # the reader's interest it is shown under (``filters.sections_of``)


class EntriesTaken(Exception):
    """An entry of a digest being written is already another digest's for the same subscriber."""


def lock_subscribers(session: Session, subscriber_ids: Iterable[int]) -> None:
    """Take the subscribers' rows for this transaction, in id order, so that two
    planners writing digests for one subscriber take turns and the second sees what
    the first claimed (``refuse_double_claims``).  On SQLite a write transaction
    already holds the database's one write lock (``BEGIN IMMEDIATE``)."""
    if session.get_bind().dialect.name == "sqlite":
        return
    for part in chunks(sorted(set(subscriber_ids))):
        session.execute(
            select(SubscriberRow.id)
            .where(among(session, SubscriberRow.id, part))
            .order_by(SubscriberRow.id)
            .with_for_update()
        )


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
    not_before: datetime | None = None  # held back until then (an outside ranker may reorder it)
    language: str | None = None  # its TL;DRs' language (``digests.language``); None: none


def body_key(rows: Iterable[tuple[object, ...]]) -> str:
    """What identifies a digest's items: their content, in order (``BodyItem``)."""
    return hashlib.blake2b(repr(tuple(rows)).encode("utf-8"), digest_size=16).hexdigest()


def _identity(p: Planned) -> tuple[object, ...]:
    """What makes two items the same (a body of one interest is keyed as it always was)."""
    same = (p.entry_id, p.summary_source_id, p.why, p.tags, p.url, p.taste)
    return same if p.section is None else (*same, p.section)


class _BodyKeys:
    """``body_key`` per digest of one planner batch, hashed once per distinct
    list: the subscribers of a filter share their ``Planned`` objects.  Keeps
    each distinct body's items for ``_insert_bodies``."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, ...], tuple[str, Sequence[Planned]]] = {}
        # The very list object, when readers share one (kept in the value: its id stays its own).
        self.lists: dict[int, tuple[Sequence[Planned], str]] = {}

    def body(self, entries: Sequence[Planned]) -> str | None:
        if not entries:
            return None
        if (shared := self.lists.get(id(entries))) is not None and shared[0] is entries:
            return shared[1]
        same = tuple(map(id, entries))
        if same not in self.known:  # the entries are kept in the value, so their ids stay theirs
            self.known[same] = (
                body_key(_identity(p) for p in entries),
                entries,
            )
        self.lists[id(entries)] = (entries, self.known[same][0])
        return self.known[same][0]

    def bodies(self) -> dict[str, Sequence[Planned]]:
        return {key: entries for key, entries in self.known.values()}


def insert_digests(
    session: Session, digests: Sequence[NewDigest], *, now: datetime, message_id: Callable[[int, NewDigest], str]
) -> list[int]:
    """Insert planned digests and their bodies in bulk; their ids, in order.
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
                "next_attempt_at": d.not_before or now,
                "lease_owner": None,
                "lease_expires_at": None,
                "message_id": message_id(digest_id, d) if d.state is not DigestState.EMPTY else "",
                "entry_count": len(d.entries),
                "pending_count": d.pending,
                "smtp_code": None,
                "last_error": None,
                "planned_at": now,
                "sent_at": now if d.state is DigestState.SENT else None,
                "body_key": keys.body(d.entries),
                "nothing_at": now if d.state is DigestState.EMPTY else None,
                "checked_at": now if d.state is DigestState.EMPTY else None,
                "filter": d.filter,
                "language": d.language,
            }
            for digest_id, d in zip(ids, digests, strict=True)
        ],
    )
    _insert_bodies(session, keys.bodies())
    return ids


def _insert_bodies(session: Session, bodies: dict[str, Sequence[Planned]]) -> None:
    """The items of each body not stored yet (an earlier batch or day may have it), in
    key order: planners writing the same bodies at once wait for each other in turn."""
    stored: set[str] = set()
    for part in chunks(sorted(bodies)):
        stored.update(
            session.scalars(select(BodyItem.body_key).where(among(session, BodyItem.body_key, part)).distinct())
        )
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
            "section": p.section,
        }
        for key, entries in sorted(bodies.items())  # in one order for every planner: no deadlock
        if key not in stored
        for n, p in enumerate(entries)
    ]
    insert_ignoring_conflicts(session, BodyItem.__table__, rows)  # another planner may write one meanwhile


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
                among(session, Digest.subscriber_id, part),
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
    """Turn empty scheduled days into the digests planned for them, with their bodies.
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
                    next_attempt_at=d.not_before or now,
                    message_id=message_id(digest_id, d),
                    entry_count=len(d.entries),
                    pending_count=d.pending,
                    planned_at=now,
                    sent_at=now if d.state is DigestState.SENT else None,
                    checked_at=now,
                    body_key=keys.body(d.entries),
                    filter=d.filter,
                    language=d.language,
                )
            ),
        )
        if result.rowcount != 1:
            raise DayTaken(f"digest #{digest_id} is no longer empty")
    _insert_bodies(session, keys.bodies())


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
    """Insert a digest and (except for resends, which show the original's) its body."""
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
    return digest.id


def entry_count_of(session: Session, digest_id: int | None) -> int:
    if digest_id is None:
        return 0
    return (
        session.scalar(
            select(func.count())
            .select_from(BodyItem)
            .join(Digest, Digest.body_key == BodyItem.body_key)
            .where(Digest.id == digest_id)
        )
        or 0
    )


def release_entries(session: Session, digest_id: int) -> None:
    """Give a cancelled digest's entries back, so a later digest can carry them
    (and drop the subscriber's planner watermark: those entries are behind it).
    The digest's body key goes too, and the body when no other digest shows it."""
    key = session.scalar(select(Digest.body_key).where(Digest.id == digest_id))
    session.execute(update(Digest).where(Digest.id == digest_id).values(body_key=None))
    if key is not None:
        drop_unshown_bodies(session, [key])
    session.execute(
        update(SubscriberRow)
        .where(SubscriberRow.id == select(Digest.subscriber_id).where(Digest.id == digest_id).scalar_subquery())
        .values(planned_through=None, planned_key=None)
    )
