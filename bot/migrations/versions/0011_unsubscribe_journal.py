"""the unsubscribe journal and the record of applied requests

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23

An unsubscribe is acknowledged once it is in ``unsubscribe_requests`` (on
SQLite that table is used from a file of its own; here it is created in the
store too, where PostgreSQL uses it).  ``applied_unsubscribes`` records each
request applied to the store, in the same transaction, so none applies twice.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "unsubscribe_requests",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("applied", sa.Boolean(), nullable=False),
    )
    op.create_index(
        "ix_unsubscribe_requests_pending",
        "unsubscribe_requests",
        ["subscriber_id"],
        sqlite_where=sa.text("NOT applied"),
        postgresql_where=sa.text("NOT applied"),
    )
    op.create_table(
        "applied_unsubscribes",
        sa.Column("request_id", sa.String(32), primary_key=True),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("applied_unsubscribes")
    op.drop_index("ix_unsubscribe_requests_pending", table_name="unsubscribe_requests")
    op.drop_table("unsubscribe_requests")
