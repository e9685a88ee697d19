"""Alembic environment: runs on the engine digestbot hands over (see store.engine)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from bot.store.schema import Base

config = context.config
engine = config.attributes.get("engine")
if engine is None:  # plain `alembic` CLI use: take the URL from -x url=...
    engine = create_engine(context.get_x_argument(as_dictionary=True)["url"])

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
