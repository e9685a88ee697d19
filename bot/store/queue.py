"""Store: the delivery queue.  Due digests claimed under a lease (in due order, each
state's off its index), leases renewed while a batch is sent, each message put on the
wire only in a transaction that proves the lease still held and the store writable,
claims given back, and what never got an answer settled as unknown.  SQL only; the
retry and bounce rules live in ``bot.delivery``, each attempt's outcome is recorded by
``answers``.

A claim is (digest, attempt): ``attempts`` grows by one at every claim, so a worker's
word on a digest counts only for the claim it made.  A claimed digest is ``sending``:

* put on the wire (``put_on_wire`` sets ``wire_at``) while its lease is held, or given
  back (``give_back``: queued or retry_wait again, the attempt not counted) if it never was;
* its outcome recorded (``answers.finish_many``) by the worker holding the claim: sent, retry_wait,
  failed, cancelled, or unknown (an answer never seen);
* its lease run out: due again if it never went on the wire (nobody can have it), else
  ``unknown`` (``settle_unanswered``: its worker may have been answered), which nothing
  sends again by itself.  The worker that waited may still record its late answer.

Leases are judged by one clock: PostgreSQL's own (``statement_timestamp()``), so a worker
whose clock is wrong takes nothing that is held; on SQLite, where one worker delivers, the
worker's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    BindParameter,
    CursorResult,
    Integer,
    Interval,
    and_,
    bindparam,
    case,
    func,
    literal,
    select,
    tuple_,
    update,
)
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.store.base import UTCDateTime
from bot.store.bulk import chunks
from bot.store.channel_tables import ChannelRow
from bot.store.schema import Digest

LeaseClock = Callable[[float], Any]  # seconds from now -> the SQL time leases are judged by


class Claim(NamedTuple):
    """A worker's claim on a digest: its id and the attempt the claim made."""

    digest_id: int
    attempt: int


def lease_clock(session: Session, now: datetime) -> LeaseClock:
    """The time leases are judged by, *seconds* from now: PostgreSQL's clock, one for
    every worker (a worker whose clock runs ahead would otherwise take every lease of a
    healthy one); on SQLite, *now*, the one worker's."""
    if session.get_bind().dialect.name == "postgresql":
        server = func.statement_timestamp(type_=UTCDateTime())
        return lambda seconds: server + literal(timedelta(seconds=seconds), Interval()) if seconds else server
    return lambda seconds: literal(now + timedelta(seconds=seconds), UTCDateTime())


def expire_leases(session: Session, now: datetime) -> tuple[int, int]:
    """End every lease at once: digests never put on the wire become due again, those on
    the wire ``unknown``.  Only for a worker that knows it is the only one: on SQLite,
    after a crash.  (Due again, unknown)."""
    result = session.execute(
        update(Digest)
        .where(Digest.state == DigestState.SENDING.value, Digest.wire_at.is_(None))
        .values(lease_expires_at=now - timedelta(seconds=1))
    )
    due = int(cast(CursorResult[Any], result).rowcount or 0)
    return due, len(settle_unanswered(session, now=now, everyone=True))


# What an unknown digest's row says: its worker stopped answering while it was on the wire.
UNANSWERED = "went on the wire; no answer seen before its worker's lease ran out (stopped, killed or paused)"


def settle_unanswered(session: Session, *, now: datetime, everyone: bool = False) -> list[int]:
    """Every ``sending`` digest put on the wire whose lease ran out (*everyone*: whatever
    its lease) becomes ``unknown``: the server may have it, so it is never claimed again.
    The worker keeps its name on the row: if it was only paused, it records the answer it
    gets.  The ids."""
    at = lease_clock(session, now)
    conditions = [Digest.state == DigestState.SENDING.value, Digest.wire_at.is_not(None)]
    if not everyone:
        conditions.append(Digest.lease_expires_at < at(0))
    settled = session.execute(
        update(Digest.__table__)
        .where(*conditions)
        .values(state=DigestState.UNKNOWN.value, lease_expires_at=None, last_error=UNANSWERED)
        .returning(Digest.__table__.c.id)
    )
    return sorted(int(digest_id) for digest_id in settled.scalars())


def _due_queries(now: datetime, leases: Any = None) -> list[Any]:
    """(next_attempt_at, id) of each due digest, one query per state: queued or
    retry_wait whose time has come, and sending whose lease ran out (by *leases*, the
    lease clock's now; else *now*) and whose message never went on the wire."""
    columns = (Digest.next_attempt_at, Digest.id)
    waiting = [
        select(*columns).where(Digest.state == state.value, Digest.next_attempt_at <= now)
        for state in (DigestState.QUEUED, DigestState.RETRY_WAIT)
    ]
    expired = select(*columns).where(
        Digest.state == DigestState.SENDING.value,
        Digest.lease_expires_at < (now if leases is None else leases),
        Digest.wire_at.is_(None),
    )
    # A channel's digests are posted by ``bot.channels``, never mailed.
    mail = Digest.subscriber_id.not_in(select(ChannelRow.subscriber_id).scalar_subquery())
    return [query.where(mail) for query in (*waiting, expired)]


def count_due(session: Session, now: datetime) -> int:
    """Digests due by *now* (their leases by the lease clock), as ``claim_due`` finds them."""
    due = _due_queries(now, lease_clock(session, now)(0))
    return sum(session.scalar(select(func.count()).select_from(query.subquery())) or 0 for query in due)


LIVE_STATES = (DigestState.QUEUED, DigestState.SENDING, DigestState.RETRY_WAIT)


def live_counts(session: Session) -> dict[DigestState, int]:
    """How many digests wait in each state that is not final (``ix_digests_due``'s
    ranges: the cost follows the queue, not the history)."""
    query = (
        select(Digest.state, func.count())
        .where(Digest.state.in_([s.value for s in LIVE_STATES]))
        .group_by(Digest.state)
    )
    counts = {state: 0 for state in LIVE_STATES}
    counts.update({DigestState(state): int(n) for state, n in session.execute(query)})
    return counts


def count_unknown(session: Session) -> int:
    """Digests whose message went on the wire with no answer seen (off ``ix_digests_due``)."""
    return int(session.scalar(select(func.count()).where(Digest.state == DigestState.UNKNOWN.value)) or 0)


def oldest_due_at(session: Session, now: datetime) -> datetime | None:
    """When the digest that has waited longest among those due now became due."""
    due = _due_queries(now, lease_clock(session, now)(0))
    firsts = [session.scalar(select(func.min(q.subquery().c.next_attempt_at))) for q in due]
    found = [f for f in firsts if f is not None]
    return min(found) if found else None


def claim_due(session: Session, *, now: datetime, worker: str, lease_seconds: int, limit: int) -> list[Claim]:
    """Take up to *limit* digests that are due (queued, retry time reached, or a
    ``sending`` never put on the wire whose lease expired), oldest ``next_attempt_at``
    first, and lease them to *worker*.  Due by *now*; leases by the lease clock.

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
    at = lease_clock(session, now)
    due: list[tuple[datetime, int]] = []
    for query in _due_queries(now, at(0)):
        query = query.order_by(Digest.next_attempt_at, Digest.id).limit(limit)
        if postgres:
            query = query.with_for_update(skip_locked=True)
        due.extend((due_at, digest_id) for due_at, digest_id in session.execute(query))
    return lease_digests(session, [digest_id for _, digest_id in sorted(due)[:limit]], worker, at(lease_seconds))


def lease_digests(session: Session, ids: Sequence[int], worker: str, until: Any) -> list[Claim]:
    """Lease the due digests *ids* (found and locked by the caller) to *worker* until
    *until* (the lease clock's): each a claim of its next attempt."""
    if not ids:
        return []
    table = Digest.__table__
    claimed = session.execute(
        update(table)
        .where(table.c.id.in_(ids))
        .values(
            state=DigestState.SENDING.value,
            lease_owner=worker,
            lease_expires_at=until,
            attempts=table.c.attempts + 1,
            wire_at=None,
        )
        .returning(table.c.id, table.c.attempts)
    )
    attempts = {int(digest_id): int(attempt) for digest_id, attempt in claimed}
    return [Claim(digest_id, attempts[digest_id]) for digest_id in ids]


def renew_leases(
    session: Session, digest_ids: Sequence[int], *, worker: str, now: datetime, lease_seconds: int
) -> tuple[set[int], set[int]]:
    """Extend *worker*'s lease on those of *digest_ids* it still holds (``sending``, its
    name on them, expired or not: nobody took them).  The ids still held, and those
    another worker holds now (it took them after the lease ran out).  Any other was
    recorded (by this worker or another) or settled unknown: none of them is this
    worker's to send either."""
    held: set[int] = set()
    taken: set[int] = set()
    table = Digest.__table__
    at = lease_clock(session, now)
    for part in chunks(sorted(set(digest_ids))):
        renewed = session.execute(
            update(table)
            .where(
                table.c.id.in_(part),
                table.c.lease_owner == worker,
                table.c.state == DigestState.SENDING.value,
            )
            .values(lease_expires_at=at(lease_seconds))
            .returning(table.c.id)
        )
        kept = {int(digest_id) for digest_id in renewed.scalars()}
        held |= kept
        others = [digest_id for digest_id in part if digest_id not in kept]
        if others:
            taken.update(
                session.scalars(
                    select(Digest.id).where(
                        Digest.id.in_(others),
                        Digest.state == DigestState.SENDING.value,
                        Digest.lease_owner != worker,
                    )
                )
            )
    return held, taken


def claimed(claims: Sequence[tuple[int, int]]) -> Any:
    """``(id, attempts) IN claims``: a worker's word counts only for the claim it made."""
    return tuple_(Digest.__table__.c.id, Digest.__table__.c.attempts).in_(list(claims))


def put_on_wire(
    session: Session, claims: Sequence[tuple[int, int]], *, worker: str, now: datetime, lease_seconds: int
) -> set[int]:
    """Of *claims* (digest, attempt), those *worker* still holds, marked as going on the
    wire now (their leases renewed): the ids.  Only these may be sent; once marked, a
    digest is never claimed again (its lease running out makes it ``unknown``), so no
    pause of the worker after this commit can let another send it too.  A digest
    another worker took, or that was recorded, is not among them.  One statement a group,
    made once per group size (a message waits for its mark: this is on the send path)."""
    postgres = session.get_bind().dialect.name == "postgresql"
    connection = session.connection()
    at = {} if postgres else {"at": now, "expires": now + timedelta(seconds=lease_seconds)}
    marked: set[int] = set()
    for part in chunks(sorted(set(claims)), MARK_GROUP):
        values: dict[str, object] = {"worker": worker, "lease": timedelta(seconds=lease_seconds)} | at
        for n, (digest_id, attempt) in enumerate(part):
            values[f"id{n}"], values[f"attempt{n}"] = digest_id, attempt
        done = connection.execute(_marking(len(part), postgres), values)
        marked |= {int(digest_id) for digest_id in done.scalars()}
    return marked


MARK_GROUP = 64  # claims one marking statement names, at most


@functools.lru_cache(maxsize=2 * MARK_GROUP)
def _marking(count: int, postgres: bool) -> Any:
    """``put_on_wire``'s statement for *count* claims: on PostgreSQL its times are the
    server's (the lease clock), elsewhere the bound ``at`` and ``expires``."""
    table = Digest.__table__
    ids: list[BindParameter[int]] = [bindparam(f"id{n}", type_=Integer()) for n in range(count)]
    # The ids as a list (the primary key finds them: an OR of (id, attempts) pairs made
    # SQLite scan every digest being sent), each with its claim's attempt.
    attempt = case(*((table.c.id == ids[n], bindparam(f"attempt{n}")) for n in range(count)))
    named = and_(table.c.id.in_(ids), table.c.attempts == attempt)
    if postgres:
        server = func.statement_timestamp(type_=UTCDateTime())
        times = {"wire_at": server, "lease_expires_at": server + bindparam("lease", type_=Interval())}
    else:
        times = {
            "wire_at": bindparam("at", type_=UTCDateTime()),
            "lease_expires_at": bindparam("expires", type_=UTCDateTime()),
        }
    return (
        update(table)
        .where(named, table.c.lease_owner == bindparam("worker"), table.c.state == DigestState.SENDING.value)
        .values(**times)
        .returning(table.c.id)
    )


def give_back(session: Session, claims: Sequence[tuple[int, int]], *, worker: str) -> set[int]:
    """Of *claims* (digest, attempt), those *worker* still holds, due again at once, as
    they were before the claim (queued, or retry_wait with its attempts so far; this
    claim not counted as one): the ids.  Only for claims the worker knows it never put
    on the wire: a mark it wrote ahead of a message that then never went is taken off
    (no other worker can tell, which is why a mark alone keeps them off a digest)."""
    table = Digest.__table__
    returned: set[int] = set()
    for part in chunks(sorted(set(claims))):
        done = session.execute(
            update(table)
            .where(
                claimed(part),
                table.c.lease_owner == worker,
                table.c.state == DigestState.SENDING.value,
            )
            .values(
                state=case((table.c.attempts <= 1, DigestState.QUEUED.value), else_=DigestState.RETRY_WAIT.value),
                attempts=table.c.attempts - 1,
                lease_owner=None,
                lease_expires_at=None,
                wire_at=None,
            )
            .returning(table.c.id)
        )
        returned |= {int(digest_id) for digest_id in done.scalars()}
    return returned
