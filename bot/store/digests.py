"""Digests and the ledger: planning rows, claiming due work, recording outcomes."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import CursorResult, Text, and_, bindparam, case, delete, exists, func, or_, select, type_coerce, update
from sqlalchemy.orm import Session, aliased

from bot.domain import DigestContent, DigestItem, DigestKind, DigestState, EntryKind
from bot.store.entries import CHUNK, allocate_ids, bulk_insert, chunks
from bot.store.schema import Appearance, Digest, Entry, LedgerEntry, UTCDateTime
from bot.store.schema import Subscriber as SubscriberRow
from bot.store.subscribers import _view as subscriber_view


@dataclass(frozen=True, slots=True)
class Planned:
    entry_id: int
    summary_source_id: int | None
    why: str
    tags: tuple[str, ...]
    url: str


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


LedgerRow = tuple[int, int | None, str, tuple[str, ...], str]  # entry, pinned source, why, tags, url


def body_key(rows: Iterable[LedgerRow]) -> str:
    """What identifies a digest's items: its ledger rows' content, in order."""
    return hashlib.blake2b(repr(tuple(rows)).encode("utf-8"), digest_size=16).hexdigest()


class _BodyKeys:
    """``body_key`` per digest of one planner batch, hashed once per distinct
    list: the subscribers of a filter share their ``Planned`` objects."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, ...], tuple[str, Sequence[Planned]]] = {}

    def body(self, entries: Sequence[Planned]) -> str:
        same = tuple(map(id, entries))
        if same not in self.known:  # the entries are kept in the value, so their ids stay theirs
            self.known[same] = (
                body_key((p.entry_id, p.summary_source_id, p.why, p.tags, p.url) for p in entries),
                entries,
            )
        return self.known[same][0]


def insert_digests(
    session: Session, digests: Sequence[NewDigest], *, now: datetime, message_id: Callable[[int, NewDigest], str]
) -> list[int]:
    """Insert planned digests and their ledger rows in bulk; their ids, in order.
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
                "body_key": keys.body(d.entries) if d.entries else None,
            }
            for digest_id, d in zip(ids, digests, strict=True)
        ],
    )
    # Built and written a chunk at a time: a batch of 1,000 subscribers has ~30,000
    # rows, and as dicts at once they were the planner's peak memory.
    ledger = (
        {
            "subscriber_id": d.subscriber_id,
            "entry_id": p.entry_id,
            "digest_id": digest_id,
            "position": n,
            # The same tuple for every subscriber of a filter: encoded to JSON once (bulk_insert).
            "summary_source_id": p.summary_source_id,
            "why": p.why,
            "tags": p.tags,
            "url": p.url,
        }
        for digest_id, d in zip(ids, digests, strict=True)
        for n, p in enumerate(d.entries)
    )
    while part := list(itertools.islice(ledger, 5_000)):
        bulk_insert(session, LedgerEntry.__table__, part)
    return ids


def scheduled_days(session: Session, subscriber_ids: Sequence[int], days: Iterable[date]) -> set[tuple[int, date]]:
    """Which (subscriber, local day) pairs already have their scheduled digest."""
    found: set[tuple[int, date]] = set()
    day_list = sorted(set(days))
    for part in chunks(list(subscriber_ids)):
        rows = session.execute(
            select(Digest.subscriber_id, Digest.local_date).where(
                Digest.kind == DigestKind.SCHEDULED.value,
                Digest.subscriber_id.in_(part),
                Digest.local_date.in_(day_list),
            )
        )
        found.update((sid, day) for sid, day in rows)
    return found


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
    """Insert a digest and (except for resends, which reuse the original's) its ledger rows."""
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
    )
    session.add(digest)
    session.flush()
    if kind is not DigestKind.RESEND:
        bulk_insert(
            session,
            LedgerEntry.__table__,
            [
                {
                    "subscriber_id": subscriber_id,
                    "entry_id": p.entry_id,
                    "digest_id": digest.id,
                    "position": n,
                    "summary_source_id": p.summary_source_id,
                    "why": p.why,
                    "tags": list(p.tags),
                    "url": p.url,
                }
                for n, p in enumerate(entries)
            ],
        )
    return digest.id


def entry_count_of(session: Session, digest_id: int | None) -> int:
    if digest_id is None:
        return 0
    return session.scalar(select(func.count()).select_from(LedgerEntry).where(LedgerEntry.digest_id == digest_id)) or 0


def set_message_id(session: Session, digest_id: int, message_id: str) -> None:
    session.execute(update(Digest).where(Digest.id == digest_id).values(message_id=message_id))


def expire_leases(session: Session, now: datetime) -> int:
    """End every lease at once (the digests in ``sending`` become due again).
    Only for a worker that knows it is the only one: on SQLite, after a crash."""
    result = session.execute(
        update(Digest)
        .where(Digest.state == DigestState.SENDING.value)
        .values(lease_expires_at=now - timedelta(seconds=1))
    )
    return int(cast(CursorResult[Any], result).rowcount or 0)


def _due_queries(now: datetime) -> list[Any]:
    """(next_attempt_at, id) of each due digest, one query per state: queued or
    retry_wait whose time has come, and sending whose lease ran out."""
    columns = (Digest.next_attempt_at, Digest.id)
    waiting = [
        select(*columns).where(Digest.state == state.value, Digest.next_attempt_at <= now)
        for state in (DigestState.QUEUED, DigestState.RETRY_WAIT)
    ]
    expired = select(*columns).where(Digest.state == DigestState.SENDING.value, Digest.lease_expires_at < now)
    return [*waiting, expired]


def count_due(session: Session, now: datetime) -> int:
    return sum(session.scalar(select(func.count()).select_from(query.subquery())) or 0 for query in _due_queries(now))


def claim_due(session: Session, *, now: datetime, worker: str, lease_seconds: int, limit: int) -> list[int]:
    """Take up to *limit* digests that are due (queued, retry time reached, or a
    ``sending`` whose lease expired), oldest ``next_attempt_at`` first, and lease
    them to *worker*.

    One query per state, each an index range read in order (``ix_digests_due``
    is state, next_attempt_at, id), merged here: one query over all three
    states made the database collect and sort every due digest to return the
    first *limit*, so claiming a million-digest day batch by batch grew with the
    square of its size.  On PostgreSQL the rows are locked with ``FOR UPDATE
    SKIP LOCKED``: workers claiming at the same moment get disjoint batches
    instead of waiting (rows read but not taken stay locked only until this
    transaction ends).  On SQLite (one writer at a time, BEGIN IMMEDIATE) the
    clause is not needed."""
    postgres = session.get_bind().dialect.name == "postgresql"
    due: list[tuple[datetime, int]] = []
    for query in _due_queries(now):
        query = query.order_by(Digest.next_attempt_at, Digest.id).limit(limit)
        if postgres:
            query = query.with_for_update(skip_locked=True)
        due.extend((at, digest_id) for at, digest_id in session.execute(query))
    ids = [digest_id for _, digest_id in sorted(due)[:limit]]
    if ids:
        session.execute(
            update(Digest)
            .where(Digest.id.in_(ids))
            .values(
                state=DigestState.SENDING.value,
                lease_owner=worker,
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                attempts=Digest.attempts + 1,
            )
        )
    return ids


@dataclass(frozen=True, slots=True)
class DigestRow:
    id: int
    subscriber_id: int
    subscriber_email: str
    local_date: date
    kind: DigestKind
    state: DigestState
    attempts: int
    entry_count: int
    message_id: str
    smtp_code: int | None
    last_error: str | None
    planned_at: datetime
    sent_at: datetime | None
    resend_of: int | None
    lease_owner: str | None


def _row(d: Digest, email: str) -> DigestRow:
    return DigestRow(
        id=d.id,
        subscriber_id=d.subscriber_id,
        subscriber_email=email,
        local_date=d.local_date,
        kind=DigestKind(d.kind),
        state=DigestState(d.state),
        attempts=d.attempts,
        entry_count=d.entry_count,
        message_id=d.message_id,
        smtp_code=d.smtp_code,
        last_error=d.last_error,
        planned_at=d.planned_at,
        sent_at=d.sent_at,
        resend_of=d.resend_of_id,
        lease_owner=d.lease_owner,
    )


def get_digest(session: Session, digest_id: int) -> DigestRow | None:
    found = session.execute(
        select(Digest, SubscriberRow.email)
        .join(SubscriberRow, SubscriberRow.id == Digest.subscriber_id)
        .where(Digest.id == digest_id)
    ).first()
    return _row(*found) if found else None


def get_digests(session: Session, digest_ids: Sequence[int]) -> list[DigestRow]:
    """The digests that exist among *digest_ids*, in that order."""
    found: dict[int, DigestRow] = {}
    for part in chunks(list(digest_ids)):
        query = select(Digest, SubscriberRow.email).join(SubscriberRow, SubscriberRow.id == Digest.subscriber_id)
        found.update((d.id, _row(d, email)) for d, email in session.execute(query.where(Digest.id.in_(part))))
    return [found[i] for i in digest_ids if i in found]


def list_digests(
    session: Session,
    *,
    subscriber_id: int | None = None,
    state: DigestState | None = None,
    local_date: date | None = None,
    kind: DigestKind | None = None,
    limit: int | None = None,
) -> list[DigestRow]:
    query = select(Digest, SubscriberRow.email).join(SubscriberRow, SubscriberRow.id == Digest.subscriber_id)
    if subscriber_id is not None:
        query = query.where(Digest.subscriber_id == subscriber_id)
    if state is not None:
        query = query.where(Digest.state == state.value)
    if local_date is not None:
        query = query.where(Digest.local_date == local_date)
    if kind is not None:
        query = query.where(Digest.kind == kind.value)
    query = query.order_by(Digest.id.desc())
    if limit is not None:
        query = query.limit(limit)
    return [_row(d, email) for d, email in session.execute(query)]


def digest_content(session: Session, digest_id: int) -> DigestContent:
    """What a digest carries, from the ledger (a resend reads its original's rows)."""
    return digest_contents(session, [digest_id])[digest_id]


_ENTRY_COLUMNS = (
    Entry.id,
    Entry.updated_at,
    Entry.key,
    Entry.kind,
    Entry.title,
    Entry.authors,
    Entry.published,
    Entry.summary,
    Entry.summary_type,
    Entry.arxiv_id,
    Entry.doi,
    Entry.links,
    Entry.extra,
)


class ContentCache:
    """Entries and digest items kept from one batch of a delivery to the next.

    A day's digests carry a few hundred entries between them, and reading each
    entry again for every batch of 200 messages was half the cost of building
    them.  An entry is reused while its ``updated_at`` is unchanged: ingest
    sets it in the same transaction that changes any of its fields or the
    summary variants pinned to it.  Use one cache for one delivery run; it
    forgets everything when it holds more than ``LIMIT`` items."""

    LIMIT = 20_000

    def __init__(self) -> None:
        self.entries: dict[int, tuple[datetime, Any]] = {}  # id -> (updated_at, row of _ENTRY_COLUMNS)
        self.pinned: dict[tuple[int, int], str] = {}  # (entry, source) -> that source's summary variant
        self.items: dict[tuple[LedgerRow, datetime], DigestItem] = {}
        # body_key -> those ledger rows: digests of one body read them once.
        self.bodies: dict[str, list[LedgerRow]] = {}

    def load(self, session: Session, entry_ids: list[int]) -> None:
        """Make sure every entry of *entry_ids* and its pinned summary variants are current.

        All of an entry's variants are read with it: a variant is only ever
        added or filled in by the ingest that changes the entry (see
        ``upsert_source_entries``), so they are as current as the entry."""
        if len(self.items) + len(self.bodies) > self.LIMIT:
            self.entries.clear()
            self.pinned.clear()
            self.items.clear()
            self.bodies.clear()
        stale = []
        for part in chunks(entry_ids):
            for entry_id, updated_at in session.execute(select(Entry.id, Entry.updated_at).where(Entry.id.in_(part))):
                known = self.entries.get(entry_id)
                if known is None or known[0] != updated_at:
                    stale.append(entry_id)
        for part in chunks(stale):
            for entry in session.execute(select(*_ENTRY_COLUMNS).where(Entry.id.in_(part))):
                self.entries[entry.id] = (entry.updated_at, entry)
            for entry_id, source_id, summary in session.execute(
                select(Appearance.entry_id, Appearance.source_id, Appearance.summary).where(
                    Appearance.entry_id.in_(part)
                )
            ):
                if summary is None:  # NULL: the entry's current summary
                    self.pinned.pop((entry_id, source_id), None)
                else:
                    self.pinned[(entry_id, source_id)] = summary

    def item(self, row: LedgerRow) -> DigestItem:
        entry_id, source_id, why, tags, url = row
        updated_at, entry = self.entries[entry_id]
        key = (row, updated_at)
        found = self.items.get(key)
        if found is None:
            # The summary variant pinned at planning time (COALESCE(appearance, entry) as elsewhere).
            summary = self.pinned.get((entry_id, source_id), entry.summary) if source_id is not None else entry.summary
            found = self.items[key] = DigestItem(
                key=entry.key,
                kind=EntryKind(entry.kind),
                title=entry.title,
                authors=tuple(entry.authors),
                published=entry.published,
                summary=summary,
                summary_type=entry.summary_type,
                tags=tags,
                url=url,
                why=why,
                arxiv_id=entry.arxiv_id,
                doi=entry.doi,
                links=tuple(entry.links),
                extra=tuple(sorted(entry.extra.items())),
            )
        return found


def digest_contents(
    session: Session, digest_ids: Sequence[int], cache: ContentCache | None = None
) -> dict[int, DigestContent]:
    """``digest_content`` for many digests in a few queries (the send path's batch).
    One ``DigestItem`` object per distinct item, shared by the digests carrying it
    (and by later batches, through *cache*)."""
    cache = cache if cache is not None else ContentCache()
    heads: list[Any] = []
    for part in chunks(list(digest_ids)):
        heads += session.execute(
            select(
                Digest.id.label("digest_id"),
                Digest.kind,
                Digest.local_date,
                Digest.resend_of_id,
                Digest.pending_count,
                Digest.body_key,
                *SubscriberRow.__table__.c,
            )
            .join(SubscriberRow, SubscriberRow.id == Digest.subscriber_id)
            .where(Digest.id.in_(part))
        ).all()
    source_of = {
        d.digest_id: d.resend_of_id if d.kind == DigestKind.RESEND.value and d.resend_of_id else d.digest_id
        for d in heads
    }
    # A digest's own ledger rows never change once planned, so one read serves
    # every digest with the same body key (a resend reads its original's).
    keyed = {d.digest_id: d.body_key for d in heads if d.body_key is not None and source_of[d.digest_id] == d.digest_id}
    first_of: dict[str, int] = {}  # per body not read yet, the one digest whose rows are read
    for digest_id, key in keyed.items():
        if key not in cache.bodies:
            first_of.setdefault(key, digest_id)
    unread = {source_of[d.digest_id] for d in heads if d.digest_id not in keyed} | set(first_of.values())
    rows: dict[int, list[LedgerRow]] = {}
    for part in chunks(sorted(unread)):
        found = session.execute(
            select(
                LedgerEntry.digest_id,
                LedgerEntry.entry_id,
                LedgerEntry.summary_source_id,
                LedgerEntry.why,
                type_coerce(LedgerEntry.tags, Text),
                LedgerEntry.url,
            )
            .where(LedgerEntry.digest_id.in_(part))
            .order_by(LedgerEntry.digest_id, LedgerEntry.position)
        )
        for digest_id, entry_id, source_id, why, tags, url in found:
            rows.setdefault(digest_id, []).append((entry_id, source_id, why, _tags(tags), url))
    for key, digest_id in first_of.items():
        cache.bodies[key] = rows.get(digest_id, [])  # a keyed digest has rows: release_entries drops the key
    for digest_id, key in keyed.items():
        rows[digest_id] = cache.bodies[key]
    entry_ids = sorted({row[0] for found in rows.values() for row in found})
    cache.load(session, entry_ids)
    return {
        head.digest_id: DigestContent(
            digest_id=head.digest_id,
            kind=head.kind,
            local_date=head.local_date,
            subscriber=subscriber_view(head),
            items=tuple(map(cache.item, rows.get(source_of[head.digest_id], ()))),
            pending=head.pending_count,
            resend_of=head.resend_of_id,
        )
        for head in heads
    }


@lru_cache(maxsize=4096)
def _tags_of_json(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text))


def _tags(value: str | list[str]) -> tuple[str, ...]:
    """A ledger row's tags: JSON text read raw and decoded once per distinct value
    (PostgreSQL's driver hands json columns over decoded already)."""
    return _tags_of_json(value) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True, slots=True)
class Finished:
    """One attempt's outcome, for ``finish_many``."""

    digest_id: int
    state: DigestState
    code: int | None
    error: str | None
    retry_at: datetime | None = None


_FINISH = (
    update(Digest.__table__)
    .where(
        Digest.__table__.c.id == bindparam("digest_id"),
        Digest.__table__.c.lease_owner == bindparam("worker"),
        Digest.__table__.c.state == DigestState.SENDING.value,
    )
    .values(
        state=bindparam("state"),
        smtp_code=bindparam("code"),
        last_error=bindparam("error"),
        lease_owner=None,
        lease_expires_at=None,
        sent_at=func.coalesce(bindparam("sent_at", type_=UTCDateTime()), Digest.__table__.c.sent_at),
        next_attempt_at=func.coalesce(bindparam("retry_at", type_=UTCDateTime()), Digest.__table__.c.next_attempt_at),
    )
)


def finish_many(session: Session, outcomes: Sequence[Finished], *, worker: str, now: datetime) -> set[int]:
    """Record outcomes of digests *worker* still holds the lease on (one statement,
    executed for many rows); the ids recorded.  The others were reclaimed by
    someone after the lease ran out and are left to them."""
    if not outcomes:
        return set()
    query = select(Digest.id).where(
        Digest.id.in_([o.digest_id for o in outcomes]),
        Digest.lease_owner == worker,
        Digest.state == DigestState.SENDING.value,
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    held = set(session.scalars(query))
    rows = [
        {
            "digest_id": o.digest_id,
            "worker": worker,
            "state": o.state.value,
            "code": o.code,
            "error": o.error,
            "sent_at": now if o.state is DigestState.SENT else None,
            "retry_at": o.retry_at,
        }
        for o in outcomes
        if o.digest_id in held
    ]
    if rows:
        session.execute(_FINISH, rows)
    return held


def release_entries(session: Session, digest_id: int) -> None:
    """Give a cancelled digest's entries back, so a later digest can carry them
    (and drop the subscriber's planner watermark: those entries are behind it).
    The digest's body key goes too: it named the rows deleted here."""
    session.execute(delete(LedgerEntry).where(LedgerEntry.digest_id == digest_id))
    session.execute(update(Digest).where(Digest.id == digest_id).values(body_key=None))
    session.execute(
        update(SubscriberRow)
        .where(SubscriberRow.id == select(Digest.subscriber_id).where(Digest.id == digest_id).scalar_subquery())
        .values(planned_through=None, planned_key=None)
    )


def count_bounce(session: Session, subscriber_id: int, *, threshold: int, now: datetime) -> bool:
    """Count one bounce; mark the subscriber ``bounced`` at *threshold*.  True if it was."""
    row = session.get_one(SubscriberRow, subscriber_id)
    row.bounces += 1
    if row.bounces >= threshold and row.status == "active":
        row.status = "bounced"
        row.updated_at = now
        return True
    return False


def reset_bounces(session: Session, subscriber_ids: Iterable[int]) -> None:
    """A delivery succeeded: their count of bounces starts again."""
    for part in chunks(sorted(set(subscriber_ids))):
        session.execute(
            update(SubscriberRow.__table__)
            .where(SubscriberRow.__table__.c.id.in_(part), SubscriberRow.__table__.c.bounces != 0)
            .values(bounces=0)
        )


# A resend that went out, or may still go out: its original needs no other.
RESEND_DELIVERED = (DigestState.SENT.value,)
RESEND_PENDING = (DigestState.QUEUED.value, DigestState.SENDING.value, DigestState.RETRY_WAIT.value)


def _resends_of(original: Any, states: Sequence[str]) -> Any:
    resend = aliased(Digest)
    return exists().where(
        resend.resend_of_id == original.id, resend.kind == DigestKind.RESEND.value, resend.state.in_(states)
    )


def failed_without_resend(session: Session) -> list[int]:
    """Failed digests (resends aside) that no resend has delivered or is delivering."""
    return list(
        session.scalars(
            select(Digest.id)
            .where(
                Digest.state == DigestState.FAILED.value,
                Digest.kind != DigestKind.RESEND.value,
                ~_resends_of(Digest, RESEND_DELIVERED + RESEND_PENDING),
            )
            .order_by(Digest.id)
        )
    )


def pending_resend_of(session: Session, digest_id: int) -> int | None:
    """A resend of *digest_id* that is still on its way, if there is one."""
    return session.scalar(
        select(Digest.id)
        .where(
            Digest.resend_of_id == digest_id, Digest.kind == DigestKind.RESEND.value, Digest.state.in_(RESEND_PENDING)
        )
        .limit(1)
    )


def lock_digest(session: Session, digest_id: int) -> None:
    """Hold *digest_id*'s row until the transaction ends (PostgreSQL; SQLite writes one at a time)."""
    session.execute(select(Digest.id).where(Digest.id == digest_id).with_for_update())


def stats_by_day(session: Session) -> list[tuple[date, dict[str, int]]]:
    """Digests per local day and state, each counted once by its outcome: a failed
    digest whose resend was delivered counts as sent, one whose resend is on its way
    as pending (``retry_wait``); resends themselves are counted apart, as ``resent``."""
    state = case(
        (and_(Digest.state == DigestState.FAILED.value, _resends_of(Digest, RESEND_DELIVERED)), DigestState.SENT.value),
        (
            and_(Digest.state == DigestState.FAILED.value, _resends_of(Digest, RESEND_PENDING)),
            DigestState.RETRY_WAIT.value,
        ),
        else_=Digest.state,
    )
    kind = case((Digest.kind == DigestKind.RESEND.value, "resent"), else_=state)
    rows = session.execute(
        select(Digest.local_date, kind, func.count())
        .where(or_(Digest.kind != DigestKind.RESEND.value, Digest.state == DigestState.SENT.value))
        .group_by(Digest.local_date, kind)
    )
    days: dict[date, dict[str, int]] = {}
    for day, outcome, count in rows:
        days.setdefault(day, {})[outcome] = count
    return sorted(days.items(), reverse=True)


def bounced_by_day(session: Session) -> dict[date, int]:
    rows = session.execute(
        select(Digest.local_date, func.count())
        .join(SubscriberRow, SubscriberRow.id == Digest.subscriber_id)
        .where(SubscriberRow.status == "bounced", Digest.state == DigestState.FAILED.value)
        .group_by(Digest.local_date)
    )
    return {day: count for day, count in rows}
