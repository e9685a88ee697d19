"""Store: filters' standing rankings (``filter_rankings``), a cache of derived data.

SQL only: what a ranking holds and when it is stale is ``bot.choose.standing_ranking``'s and
``bot.plan.standings``'s business.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import CursorResult, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from bot.store.bulk import among, chunks
from bot.store.derived_tables import FilterRanking
from bot.store.row_shapes import RowShape


@dataclass(frozen=True, slots=True)
class StoredRanking:
    ranking_key: str
    weighed_to: datetime
    covers_from: datetime
    tagged: str
    body: bytes


RANKING = RowShape(StoredRanking)


def ranking_stamps(session: Session, keys: Iterable[str]) -> dict[str, tuple[datetime, datetime, str]]:
    """Per stored ranking of *keys*: what it was weighed to, what it covers from, and
    the tags it was made under; not its body (a planner that kept it has it)."""
    found: dict[str, tuple[datetime, datetime, str]] = {}
    for part in chunks(sorted(set(keys))):
        query = select(
            FilterRanking.ranking_key, FilterRanking.weighed_to, FilterRanking.covers_from, FilterRanking.tagged
        ).where(among(session, FilterRanking.ranking_key, part))
        found.update(
            (key, (weighed_to, covers_from, tagged)) for key, weighed_to, covers_from, tagged in session.execute(query)
        )
    return found


def ranking_bodies(session: Session, keys: Iterable[str]) -> dict[str, StoredRanking]:
    found: dict[str, StoredRanking] = {}
    for part in chunks(sorted(set(keys))):
        query = select(
            FilterRanking.ranking_key,
            FilterRanking.weighed_to,
            FilterRanking.covers_from,
            FilterRanking.tagged,
            FilterRanking.body,
        ).where(among(session, FilterRanking.ranking_key, part))
        for row in session.execute(query):
            found[row.ranking_key] = RANKING.of(row)
    return found


def store_rankings(session: Session, rankings: Sequence[StoredRanking]) -> None:
    """Write *rankings*, each replacing the stored one of its key unless that one was
    brought further (another planner's pass, later than this one).  In key order, so
    that planners writing the same filters' rankings at once never deadlock."""
    if not rankings:
        return
    build = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    statement = build(FilterRanking)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[FilterRanking.ranking_key],
            set_={
                "weighed_to": statement.excluded.weighed_to,
                "covers_from": statement.excluded.covers_from,
                "tagged": statement.excluded.tagged,
                "body": statement.excluded.body,
            },
            where=FilterRanking.weighed_to <= statement.excluded.weighed_to,
        ),
        [
            {
                "ranking_key": r.ranking_key,
                "weighed_to": r.weighed_to,
                "covers_from": r.covers_from,
                "tagged": r.tagged,
                "body": r.body,
            }
            for r in sorted(rankings, key=lambda r: r.ranking_key)
        ],
    )


def forget_rankings(session: Session, *, older_than: datetime | None = None) -> int:
    """Drop the rankings not brought up to date since *older_than* (all, without it):
    filters no reader has any more."""
    statement = delete(FilterRanking)
    if older_than is not None:
        statement = statement.where(FilterRanking.weighed_to < older_than)
    result: CursorResult[Any] = session.execute(statement)  # type: ignore[assignment]
    return result.rowcount or 0
