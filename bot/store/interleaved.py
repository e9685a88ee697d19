"""Store: the interleaved digests sent over a window and their readers' ratings, for
the judge of outside rankers (``bot.rankers.interleave``).  SQL only."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.domain import DigestState
from bot.domain.ranking import JudgedDigest
from bot.store.bulk import among, chunks
from bot.store.schema import BodyItem, Digest
from bot.store.taste_tables import Feedback


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
