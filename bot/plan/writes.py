"""Plan stage: writing what a batch of due subscribers is planned (their digests with
their bodies, watermarks, empty days looked at again) so that no reader is given a day
or an entry twice, whichever other planner or manual digest wrote first.  Never
chooses entries, never renders or sends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from bot.config import SenderConfig
from bot.domain import DigestState
from bot.plan.message_ids import message_id_for
from bot.plan.news import attach_news
from bot.store.engine import transaction
from bot.store.ledger import (
    DayTaken,
    EntriesTaken,
    NewDigest,
    fill_empty_days,
    insert_digests,
    lock_subscribers,
    mark_checked,
)
from bot.store.rankings import StoredRanking
from bot.store.sent import refuse_double_claims
from bot.store.subscribers import set_watermarks

MakeId = Callable[[int, NewDigest], str]


@dataclass
class Batch:
    """What one batch of due subscribers is planned, before it is written."""

    choices: list[NewDigest] = field(default_factory=list)
    marks: list[tuple[int, datetime, str]] = field(default_factory=list)  # watermarks
    still_empty: list[int] = field(default_factory=list)  # empty days looked at again
    oldest: list[datetime] = field(default_factory=list)  # no entry chosen was first seen before these


class Rankings(Protocol):
    """The pass's rankings waiting to be written (``bot.plan.standings.Standings``)."""

    unsaved: list[StoredRanking]

    def save_in(self, session: Session) -> None: ...


def write_held(
    session: Session, batch: Batch, *, now: datetime, make_id: MakeId, rankings: Rankings
) -> list[tuple[int, NewDigest]] | None:
    """Write *batch* in the session that read what its readers were sent, having held
    them since before it read (``lock_subscribers`` on PostgreSQL; on SQLite the store's
    one write lock, taken by its first read), so no rival can have given these readers
    anything since: nothing is read again.  None (and nothing written) when the write is
    refused; ``write_batch`` then takes it piece by piece."""
    try:
        written = _write_digests(session, batch.choices, now=now, make_id=make_id, held=True)
        mark_checked(session, batch.still_empty, now)
        set_watermarks(session, batch.marks)
        rankings.save_in(session)
        session.commit()
        rankings.unsaved.clear()
        return written
    except (IntegrityError, DayTaken, EntriesTaken):
        session.rollback()
        return None


def write_batch(
    factory: sessionmaker[Session],
    batch: Batch,
    *,
    now: datetime,
    make_id: MakeId,
    bodies: dict[str, frozenset[int]] | None = None,
) -> list[tuple[int, NewDigest]]:
    """Write a batch's digests and watermarks in one transaction; the ids and digests
    written.  *bodies*: what the pass read of bodies (``refuse_double_claims``)."""
    since = min(batch.oldest, default=None)
    try:
        with transaction(factory) as session:
            written = _write_digests(session, batch.choices, now=now, make_id=make_id, bodies=bodies, since=since)
            mark_checked(session, batch.still_empty, now)
            set_watermarks(session, batch.marks)
        return written
    except (IntegrityError, DayTaken, EntriesTaken):
        pass
    # Another planner took some of these subscribers' days (or entries) first:
    # write the others one by one and leave those alone.
    written = []
    for choice in batch.choices:
        try:
            with transaction(factory) as session:
                written += _write_digests(session, [choice], now=now, make_id=make_id, bodies=bodies, since=since)
                set_watermarks(session, [m for m in batch.marks if m[0] == choice.subscriber_id])
        except (IntegrityError, DayTaken, EntriesTaken):
            continue
    with transaction(factory) as session:
        mark_checked(session, batch.still_empty, now)
    return written


def _write_digests(
    session: Session,
    choices: list[NewDigest],
    *,
    now: datetime,
    make_id: MakeId,
    bodies: dict[str, frozenset[int]] | None = None,
    since: datetime | None = None,
    held: bool = False,
) -> list[tuple[int, NewDigest]]:
    """New digests inserted, empty days filled; each with its id.  Raises
    ``EntriesTaken`` when another planner gave one of these subscribers one of these
    entries since this pass read what they had (*held*: the session that read it has
    held these subscribers since, so none can have)."""
    if not held:
        lock_subscribers(session, [c.subscriber_id for c in choices if c.entries])
    new = [c for c in choices if c.fills is None]
    fills = [(c.fills, c) for c in choices if c.fills is not None]
    fill_empty_days(session, fills, now=now, message_id=make_id)
    ids = insert_digests(session, new, now=now, message_id=make_id) if new else []
    written = [*zip(ids, new, strict=True), *fills]
    if not held:
        claims = [(digest_id, c.subscriber_id, _entry_ids(c)) for digest_id, c in written]
        refuse_double_claims(session, claims, ids[0] if ids else None, bodies, since=since)
    mailed = [(digest_id, c.subscriber_id) for digest_id, c in written if c.entries and c.state is DigestState.QUEUED]
    attach_news(session, mailed, now)  # a feed-only digest (sent once planned) lists no revisions
    return written


def _entry_ids(digest: NewDigest) -> list[int]:
    return [p.entry_id for p in digest.entries]


def message_ids(sender: SenderConfig) -> MakeId:
    """Makes each digest's Message-ID from its new id."""

    def make(digest_id: int, digest: NewDigest) -> str:
        return message_id_for(digest_id, digest.subscriber_id, digest.local_date, digest.kind.value, sender)

    return make
