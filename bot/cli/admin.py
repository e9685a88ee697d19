"""CLI commands ``db`` (migrations) and ``config`` (the effective configuration)."""

from __future__ import annotations

import json

import typer

from bot.cli.shell import ctx_of, out
from bot.store import engine as store_engine

db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)


config_app = typer.Typer(help="Inspect the effective configuration.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply pending migrations (run automatically on start for SQLite)."""
    c = ctx_of(ctx)
    store_engine.upgrade(c.engine)
    out.print(f"database at revision {store_engine.current_revision(c.engine)}")


@db_app.command("current")
def db_current(ctx: typer.Context) -> None:
    """Show the schema revision of the database and of this code."""
    c = ctx_of(ctx)
    out.print(f"database: {store_engine.current_revision(c.engine) or 'empty'}; code: {store_engine.head_revision()}")


@config_app.command("show")
def config_show(ctx: typer.Context) -> None:
    """Print the effective configuration as JSON (secrets masked)."""
    print(json.dumps(ctx_of(ctx).settings.redacted(), indent=2))
