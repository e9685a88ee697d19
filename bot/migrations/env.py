"""Alembic environment: runs on the engine digestbot hands over (see store.engine).

On SQLite, foreign keys are off while the migrations run: a batch migration copies a
table and drops the old one, and with them on, dropping ``subscribers`` deleted every
digest and ledger row of its subscribers (their ``ON DELETE CASCADE``).  The keys are
checked once the migrations are done, and turned on again for the connection's next user.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from bot.store.schema import Base

config = context.config
engine = config.attributes.get("engine")
if engine is None:  # plain `alembic` CLI use: take the URL from -x url=...
    engine = create_engine(context.get_x_argument(as_dictionary=True)["url"])


def _foreign_keys(connection: Connection, on: bool) -> None:
    """SQLite's foreign_keys pragma, set outside any transaction (inside one it does
    nothing), on the driver's connection before SQLAlchemy begins one."""
    connection.connection.driver_connection.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")  # type: ignore[union-attr]


with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        _foreign_keys(connection, False)
    try:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=sqlite,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                if broken:
                    raise RuntimeError(f"the migrations left rows whose foreign keys point nowhere: {broken[:5]}")
        connection.commit()
    finally:
        if sqlite:
            connection.rollback()
            _foreign_keys(connection, True)
