"""The declarative base every table derives from, its naming convention, the UTC
datetime column type and the partial index both backends read: SQL only, imported by
``schema``, ``taste_tables`` and ``llm_tables`` alike."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import DateTime, Index, MetaData, Table, TypeDecorator, text
from sqlalchemy.orm import DeclarativeBase

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    # Every model maps one Table (the store's bulk statements take it as such).
    __table__: ClassVar[Table]  # narrows DeclarativeBase's FromClause


def partial_index(name: str, *columns: str, where: str, unique: bool = False) -> Index:
    """An index of the rows *where* holds: SQLite and PostgreSQL both read the clause
    (each dialect takes it under its own keyword, so it is written once, here)."""
    clause = text(where)
    return Index(name, *columns, unique=unique, sqlite_where=clause, postgresql_where=clause)
