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
from bot.domain.rankers import Interleaving, JudgedDigest
from bot.store.bulk import among, chunks
from bot.store.schema import BodyItem, Digest
from bot.store.taste_tables import Feedback


def interleave_held(session: Session, drafts: Sequence[tuple[int, Interleaving]], *, now: datetime) -> None:
    """Pin each interleaving of *drafts* on its digest if the digest is still held
    (queued, never tried), and let it go now: one short statement per digest, whatever
    its length (the body stays as planned)."""
    if not drafts:
        return
    table = Digest.__table__
    held = (table.c.id == bindparam("held_id"), table.c.state == DigestState.QUEUED.value, table.c.attempts == 0)
    session.execute(  # one statement for the batch's digests, executed many times
        update(table).where(*held).values(interleaving=bindparam("drafted"), next_attempt_at=now),
        [{"held_id": digest_id, "drafted": drafted.as_text()} for digest_id, drafted in drafts],
    )


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
        select(Digest.id, Digest.subscriber_id, Digest.interleaving, BodyItem.entry_id)
        .join(BodyItem, BodyItem.body_key == Digest.body_key)
        .where(Digest.sent_at >= since, Digest.state == DigestState.SENT.value, Digest.interleaving.is_not(None))
        .order_by(Digest.id, BodyItem.position)
    )
    bodies: dict[int, tuple[int, str | None, list[int]]] = {}
    for digest_id, subscriber_id, drafted, entry_id in session.execute(shown):
        bodies.setdefault(digest_id, (subscriber_id, drafted, []))[2].append(entry_id)
    digests: dict[int, tuple[int, dict[int, str]]] = {}
    for digest_id, (subscriber_id, drafted, entries) in bodies.items():
        if (pinned := Interleaving.from_text(drafted, len(entries))) is not None:
            digests[digest_id] = (subscriber_id, {e: pinned.placed_by(n) for n, e in enumerate(entries)})
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
