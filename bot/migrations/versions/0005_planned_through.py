"""planner watermark per subscriber

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22

``subscribers.planned_through``: every entry first seen up to this moment has
been weighed for the subscriber and, if it matched, claimed in the ledger;
valid only while ``planned_key`` (their filter, backfill and the tag rules)
is unchanged.  The planner then reads a day of entries per subscriber instead
of everything since they subscribed.  NULL: no watermark (plan from the
subscription window, as before).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscribers") as batch_op:
        batch_op.add_column(sa.Column("planned_through", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("planned_key", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("subscribers") as batch_op:
        batch_op.drop_column("planned_key")
        batch_op.drop_column("planned_through")
