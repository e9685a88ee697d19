"""record when a day was found empty and last looked at again

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23

A scheduled day found with nothing new stays open until it closes
(``schedule.day_closes_hour``): entries that arrive later that day fill it.
``nothing_at`` keeps when the planner first found nothing (for ``history``),
``checked_at`` when it last looked again, so that it looks again only after
new entries have arrived.  Existing empty days get both from ``planned_at``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("digests") as batch:
        batch.add_column(sa.Column("nothing_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE digests SET nothing_at = planned_at, checked_at = planned_at WHERE state = 'empty'")


def downgrade() -> None:
    with op.batch_alter_table("digests") as batch:
        batch.drop_column("checked_at")
        batch.drop_column("nothing_at")
