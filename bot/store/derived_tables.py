"""Tables of data derived from the rest of the store, made again whenever they are
missing or cannot be read: a filter's standing ranking (``bot.plan.standings``), the
slices of the planning pass under way (``bot.plan.shared``).
``bot.store.schema`` imports this module, so that ``Base.metadata`` holds them; change
them only with a new Alembic revision.  A restore leaves them empty rather than trust
a backup's bytes for them (``DERIVED_TABLES``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from bot.store.base import Base, UTCDateTime


class FilterRanking(Base):
    """A filter's standing ranking (``bot.choose.standing_ranking``), kept between planning
    passes (migration 0026); ``tagged`` is the store's ``tags_retagged_at`` fact when it
    was made."""

    __tablename__ = "filter_rankings"

    ranking_key: Mapped[str] = mapped_column(String(40), primary_key=True)
    weighed_to: Mapped[datetime] = mapped_column(UTCDateTime)
    covers_from: Mapped[datetime] = mapped_column(UTCDateTime)
    tagged: Mapped[str] = mapped_column(String(64))
    body: Mapped[bytes] = mapped_column(LargeBinary)


class PlanningSlice(Base):
    """A range of subscribers (ids *first_id* to *last_id*) of the planning pass that
    started at *pass_at*, planned by whichever process holds its row (migration 0027)."""

    __tablename__ = "planning_slices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pass_at: Mapped[datetime] = mapped_column(UTCDateTime)
    first_id: Mapped[int] = mapped_column(Integer)
    last_id: Mapped[int] = mapped_column(Integer)
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    done_by: Mapped[str | None] = mapped_column(String(200), nullable=True)


DERIVED_TABLES = frozenset({FilterRanking.__tablename__, PlanningSlice.__tablename__})
