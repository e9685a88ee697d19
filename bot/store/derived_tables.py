"""Tables of data derived from the rest of the store, made again whenever they are
missing or cannot be read: a filter's standing ranking (``bot.plan.standing``).
``bot.store.schema`` imports this module, so that ``Base.metadata`` holds them; change
them only with a new Alembic revision.  A restore leaves them empty rather than trust
a backup's bytes for them (``DERIVED_TABLES``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from bot.store.base import Base, UTCDateTime


class FilterRanking(Base):
    """A filter's standing ranking (``bot.choose.standing``), kept between planning
    passes (migration 0026); ``tagged`` is the store's ``tags_retagged_at`` fact when it
    was made."""

    __tablename__ = "filter_rankings"

    ranking_key: Mapped[str] = mapped_column(String(40), primary_key=True)
    weighed_to: Mapped[datetime] = mapped_column(UTCDateTime)
    covers_from: Mapped[datetime] = mapped_column(UTCDateTime)
    tagged: Mapped[str] = mapped_column(String(64))
    body: Mapped[bytes] = mapped_column(LargeBinary)


DERIVED_TABLES = frozenset({FilterRanking.__tablename__})
