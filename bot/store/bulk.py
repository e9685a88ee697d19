"""Store: bulk SQL helpers every entity module uses (batched inserts through the
driver's executemany, id allocation, chunks for ``IN (...)``).  SQL only; no rules."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

from sqlalchemy import ColumnElement, String, any_, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

# Well under SQLite's 32766 bound-parameter limit and PostgreSQL's 65535.
CHUNK = 900


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def among(session: Session, column: Any, values: Sequence[Any]) -> ColumnElement[bool]:
    """``column IN (values)``; on PostgreSQL ``column = ANY(array)``: one parameter
    whatever the list's length, so the statement's text is the same from call to call
    and neither SQLAlchemy nor the driver rewrites a placeholder per value, and the
    server may keep its plan.  Strings go as ``VARCHAR[]`` without the column's length:
    a cast to ``VARCHAR(100)[]`` would cut a longer value and match on its prefix."""
    if session.get_bind().dialect.name == "postgresql":
        element = String() if isinstance(column.type, String) else column.type
        return cast(ColumnElement[bool], column == any_(bindparam(None, list(values), type_=ARRAY(element))))
    return cast(ColumnElement[bool], column.in_(values))


def bulk_insert(session: Session, table: Any, rows: list[dict[str, Any]], *, ignore_conflicts: bool = False) -> None:
    """executemany INSERT (optionally ON CONFLICT DO NOTHING) on SQLite and PostgreSQL.

    The statement is compiled once and the column types' bind processors are
    applied here, then the driver's executemany runs directly: at 10k rows
    SQLAlchemy's per-row parameter handling costs as much as SQLite's insert.
    Every row must have the same keys.
    """
    if not rows:
        return
    connection = session.connection()
    dialect = connection.dialect
    build = pg_insert if dialect.name == "postgresql" else sqlite_insert
    statement = build(table).values({name: bindparam(name) for name in rows[0]})
    if ignore_conflicts:
        statement = statement.on_conflict_do_nothing()
    compiled = statement.compile(dialect=dialect)
    processors = compiled._bind_processors  # noqa: SLF001 - the documented per-type bind processors
    names = list(compiled.positiontup or ()) if compiled.positional else list(rows[0])
    # Column by column (map runs in C), then zip into rows: a per-row generator
    # costs as much as the insert itself at 10k rows.
    columns = []
    for name in names:
        values = [row[name] for row in rows]
        processor = processors.get(name)
        if processor is not None:
            values = _processed(cast(Callable[[Any], Any], processor), values)
        columns.append(values)
    tuples = zip(*columns, strict=True)
    params: list[Any] = list(tuples) if compiled.positional else [dict(zip(names, r, strict=True)) for r in tuples]
    connection.exec_driver_sql(str(compiled), params)


def _processed(processor: Callable[[Any], Any], values: list[Any]) -> list[Any]:
    """*processor* applied to each value, once per distinct object: rows often share
    one (a batch's timestamp, a body item's tags shared by every subscriber of a
    filter), and JSON encoding is the dearest part of a row."""
    done: dict[int, Any] = {}  # by id(): *values* keeps every object alive meanwhile
    out = []
    for value in values:
        key = id(value)
        if key not in done:
            done[key] = processor(value)
        out.append(done[key])
    return out


def allocate_ids(session: Session, table: Any, count: int) -> range | list[int]:
    """*count* fresh primary keys for *table*.  SQLite: after MAX(id), safe because
    our transactions begin IMMEDIATE (one writer); PostgreSQL: from its sequence."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        sequence = f"{table.name}_id_seq"
        return list(
            connection.execute(select(func.nextval(sequence)).select_from(func.generate_series(1, count))).scalars()
        )
    start = connection.execute(select(func.coalesce(func.max(table.c.id), 0))).scalar_one()
    return range(start + 1, start + 1 + count)


def insert_ignoring_conflicts(session: Session, table: Any, rows: list[dict[str, Any]]) -> None:
    bulk_insert(session, table, rows, ignore_conflicts=True)
