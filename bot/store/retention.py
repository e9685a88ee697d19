"""Store: removing what ``database.keep_days`` no longer keeps, in small batches.
SQL only; what may be removed without sending anything twice is ``bot.plan.retention``'s
rule.  Never removes a digest that is not settled, nor an entry."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, exists, select, update
from sqlalchemy.orm import Session, aliased

from bot.domain import SETTLED_STATES, Removed
from bot.store.bulk import chunks
from bot.store.schema import AppearanceRow, BodyItem, Digest, Entry, Retention, RevisionNotice, Source

_SETTLED = sorted(state.value for state in SETTLED_STATES)


def expired_digests(session: Session, before: datetime, limit: int) -> list[tuple[int, str | None]]:
    """Up to *limit* settled digests planned before *before* (id, body key), oldest id
    first; not one whose resend is still on its way (it shows the original's body)."""
    resend = aliased(Digest)
    on_its_way = exists().where(resend.resend_of_id == Digest.id, resend.state.not_in(_SETTLED))
    query = (
        select(Digest.id, Digest.body_key)
        .where(Digest.planned_at < before, Digest.state.in_(_SETTLED), ~on_its_way)
        .order_by(Digest.id)
        .limit(limit)
    )
    return [(digest_id, key) for digest_id, key in session.execute(query)]


def remove_digests(session: Session, digests: Sequence[tuple[int, str | None]]) -> None:
    """Delete the digests and the bodies no other digest shows."""
    ids = [digest_id for digest_id, _ in digests]
    for part in chunks(ids):
        session.execute(update(Digest).where(Digest.resend_of_id.in_(part)).values(resend_of_id=None))
        session.execute(delete(Digest).where(Digest.id.in_(part)))
    drop_unshown_bodies(session, sorted({key for _, key in digests if key is not None}))


def drop_unshown_bodies(session: Session, keys: Sequence[str]) -> None:
    """Delete the items of those bodies that no digest shows any more."""
    for part in chunks(list(keys)):
        shown = set(session.scalars(select(Digest.body_key).where(Digest.body_key.in_(part)).distinct()))
        unshown = [key for key in part if key not in shown]
        if unshown:
            session.execute(delete(BodyItem).where(BodyItem.body_key.in_(unshown)))


def remove_notices(session: Session, before: datetime) -> None:
    """Forget revisions told before *before*: the digests that carried those entries are gone."""
    session.execute(delete(RevisionNotice).where(RevisionNotice.reported_at < before))


def _unread() -> list[Any]:
    """An appearance no kept entry or body reads: not the summary variant its entry
    carries now, nor one a kept digest body pins."""
    current = exists().where(Entry.id == AppearanceRow.entry_id, Entry.summary_source_id == AppearanceRow.source_id)
    pinned = exists().where(
        BodyItem.entry_id == AppearanceRow.entry_id, BodyItem.summary_source_id == AppearanceRow.source_id
    )
    return [~current, ~pinned]


def sources_with_unread_appearances(session: Session, before: datetime) -> list[int]:
    """Sources ingested before *before* with appearances nothing reads any more."""
    query = (
        select(AppearanceRow.source_id)
        .join(Source, Source.id == AppearanceRow.source_id)
        .where(Source.ingested_at < before, *_unread())
        .distinct()
        .order_by(AppearanceRow.source_id)
    )
    return list(session.scalars(query))


def remove_appearances(session: Session, source_id: int) -> int:
    """Delete the source's appearances that nothing reads any more; how many."""
    result = session.execute(delete(AppearanceRow).where(AppearanceRow.source_id == source_id, *_unread()))
    return int(getattr(result, "rowcount", 0) or 0)


def note_removed(session: Session, before: datetime, digests: int, now: datetime) -> None:
    """Record that digests planned before *before* are gone (*digests* more of them)."""
    row = session.get(Retention, 1)
    if row is None:
        session.add(Retention(id=1, removed_before=before, digests_removed=digests, last_run_at=now))
        return
    row.removed_before = max(row.removed_before, before)
    row.digests_removed += digests
    row.last_run_at = now


def removed(session: Session) -> Removed | None:
    """What retention has removed, or None when it never removed anything."""
    row = session.get(Retention, 1)
    if row is None or not row.digests_removed:
        return None
    return Removed(row.removed_before, row.digests_removed)
