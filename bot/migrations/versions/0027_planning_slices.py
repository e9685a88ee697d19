"""planning slices: a planning pass shared by several processes on PostgreSQL

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27

The scheduler cuts each planning pass into ranges of subscribers; every scheduler and
worker on the store plans the ranges it can lock (``bot.plan.shared``).  A range's row
is locked while it is planned and marked done after, so a process that dies leaves its
range to the others.  The table holds only the pass under way: empty after this
migration, and a restore leaves it empty.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "planning_slices",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("pass_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_id", sa.Integer(), nullable=False),
        sa.Column("last_id", sa.Integer(), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("done_by", sa.String(200), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("planning_slices")
