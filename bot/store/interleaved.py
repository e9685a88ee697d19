"""Store: interleaved digests.  A held digest given its interleaved order, or let go
in the built-in one (``bot.plan.challenger``); the interleaved digests sent over a
window and their readers' ratings, for the judge of outside rankers
(``bot.rankers.interleave``).  SQL only."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.domain.ranking import JudgedDigest
from bot.store.bulk import among, chunks
from bot.store.ledger import BodyKeys, Planned, insert_bodies
from bot.store.retention import drop_unshown_bodies
from bot.store.schema import BodyItem, Digest
from bot.store.taste_tables import Feedback


def reorder_held(session: Session, orders: Sequence[tuple[int, Sequence[Planned]]], *, now: datetime) -> None:
    """Give each digest of *orders* still held (queued, never tried) a body of the same
    entries in a new order, and let it go now; the bodies no digest shows any more are
    deleted."""
    if not orders:
        return
    keys, table = BodyKeys(), Digest.__table__
    old = [
        key
        for key in session.scalars(select(Digest.body_key).where(among(session, Digest.id, [i for i, _ in orders])))
        if key
    ]
    held = (table.c.id == bindparam("held_id"), table.c.state == DigestState.QUEUED.value, table.c.attempts == 0)
    session.execute(  # one statement for the batch's digests, executed many times
        update(table).where(*held).values(body_key=bindparam("reordered_key"), next_attempt_at=now),
        [{"held_id": digest_id, "reordered_key": keys.body(entries)} for digest_id, entries in orders],
    )
    insert_bodies(session, keys.bodies())
    drop_unshown_bodies(session, [*old, *keys.bodies()])  # and a new one whose digest was no longer held


def release_held(session: Session, digest_ids: Sequence[int], *, now: datetime) -> None:
    """Let held digests go now, in the order they were planned."""
    for part in chunks(list(digest_ids)):
        session.execute(
            update(Digest)
            .where(
                among(session, Digest.id, part), Digest.state == DigestState.QUEUED.value, Digest.next_attempt_at > now
            )
            .values(next_attempt_at=now)
        )


def judged_since(session: Session, since: datetime) -> Iterator[JudgedDigest]:
    """Each interleaved digest sent since *since*, with what its reader rated of it (a
    rating undone is gone; an entry is in one digest of a reader at most)."""
    shown = (
        select(Digest.id, Digest.subscriber_id, BodyItem.entry_id, BodyItem.placed_by)
        .join(BodyItem, BodyItem.body_key == Digest.body_key)
        .where(Digest.sent_at >= since, Digest.state == DigestState.SENT.value, BodyItem.placed_by.is_not(None))
        .order_by(Digest.id, BodyItem.position)
    )
    digests: dict[int, tuple[int, dict[int, str]]] = {}
    for digest_id, subscriber_id, entry_id, ranker in session.execute(shown):
        digests.setdefault(digest_id, (subscriber_id, {}))[1][entry_id] = ranker or ""
    readers = sorted({subscriber_id for subscriber_id, _ in digests.values()})
    said: dict[tuple[int, int], str] = {}
    for part in chunks(readers):
        ratings = select(Feedback.subscriber_id, Feedback.entry_id, Feedback.verdict).where(
            among(session, Feedback.subscriber_id, part)
        )
        said.update(((s, e), verdict) for s, e, verdict in session.execute(ratings))
    for digest_id, (reader, placed) in digests.items():
        verdicts = {entry: said.get((reader, entry)) for entry in placed}
        yield JudgedDigest(
            digest_id,
            placed,
            frozenset(e for e, v in verdicts.items() if v == "more"),
            frozenset(e for e, v in verdicts.items() if v == "less"),
        )
