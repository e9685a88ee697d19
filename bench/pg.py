"""A throw-away PostgreSQL schema, for the tests and the benchmarks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def postgres_schema(url: str) -> Iterator[str]:
    """A fresh schema in the test database, dropped afterwards: a URL whose
    connections see only it (search_path), so tests never share tables."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{name}"'))
    try:
        yield make_url(url).update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{name}" CASCADE'))
        admin.dispose()
