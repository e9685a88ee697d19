"""Store: the slices of a planning pass that several processes share (``planning_slices``).

SQL only; who plans which slice and when is ``bot.plan.shared``'s business.  A slice
is claimed by a row lock (``FOR UPDATE SKIP LOCKED``) that an open transaction holds on
a connection of the claimer's own, so a claimer that dies gives its slice back with its
connection, and no lease has to run out first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, delete, func, insert, literal, or_, select, update
from sqlalchemy.orm import Session

from bot.domain import SubscriberStatus
from bot.store.base import UTCDateTime
from bot.store.derived_tables import PlanningSlice
from bot.store.row_shapes import RowShape
from bot.store.schema import SubscriberRow


@dataclass(frozen=True, slots=True)
class SliceTaken:
    """A slice this process holds: the active subscribers with ids *first_id* to
    *last_id*, planned as of *pass_at*."""

    slice_id: int
    pass_at: datetime
    first_id: int
    last_id: int


SLICE = RowShape(SliceTaken, columns={"slice_id": "id"})


def open_slices(session: Session, now: datetime, size: int, *, fresh_after: datetime) -> bool:
    """Cut the active subscribers into slices of *size*, in id order, for a pass as of
    *now*; False (and nothing cut) while a pass begun since *fresh_after* still has
    slices to plan.  Drops the slices nobody holds that are done or older than that."""
    unheld = (
        select(PlanningSlice.id)
        .where(or_(PlanningSlice.done_at.is_not(None), PlanningSlice.pass_at < fresh_after))
        .with_for_update(skip_locked=True)
    )
    session.execute(delete(PlanningSlice).where(PlanningSlice.id.in_(unheld)))
    waiting = select(PlanningSlice.id).where(PlanningSlice.done_at.is_(None), PlanningSlice.pass_at >= fresh_after)
    if session.execute(waiting.limit(1)).first() is not None:
        return False
    numbered = (
        select(SubscriberRow.id, ((func.row_number().over(order_by=SubscriberRow.id) - 1) // size).label("part"))
        .where(SubscriberRow.status == SubscriberStatus.ACTIVE.value)
        .subquery()
    )
    cuts = select(literal(now, UTCDateTime), func.min(numbered.c.id), func.max(numbered.c.id)).group_by(numbered.c.part)
    session.execute(insert(PlanningSlice).from_select(["pass_at", "first_id", "last_id"], cuts))
    return True


def take_slice(connection: Connection, *, fresh_after: datetime) -> SliceTaken | None:
    """Lock the first slice to plan of a pass begun since *fresh_after* that no other
    process holds, in a transaction left open on *connection*; None when there is none."""
    query = (
        select(PlanningSlice.id, PlanningSlice.pass_at, PlanningSlice.first_id, PlanningSlice.last_id)
        .where(PlanningSlice.done_at.is_(None), PlanningSlice.pass_at >= fresh_after)
        .order_by(PlanningSlice.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    row = connection.execute(query).first()
    if row is None:
        connection.rollback()
        return None
    return SLICE.of(row)


def finish_slice(connection: Connection, taken: SliceTaken, *, now: datetime, by: str) -> None:
    """Mark the slice held on *connection* planned, and let it go."""
    statement = update(PlanningSlice).where(PlanningSlice.id == taken.slice_id).values(done_at=now, done_by=by[:200])
    connection.execute(statement)
    connection.commit()
