"""filter rankings: each filter's matches over a month, kept between planning passes

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27

A planning pass reads each filter's ranking of the last ``digest.max_age_days`` from
``filter_rankings`` and weighs only the entries that are new or changed since it was
made (``bot.plan.standings``), instead of weighing a month of entries for every filter
of readers with left-overs.  The table is derived data: empty after this migration,
filled by the next pass.

``ix_digests_subscriber_planned`` (subscriber, planned at, body) replaces the index on
``digests.subscriber_id``: a pass reads which bodies a batch of readers was sent since
their windows start from the index alone, not from a month of digest rows each.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "filter_rankings",
        sa.Column("ranking_key", sa.String(40), primary_key=True),
        sa.Column("weighed_to", sa.DateTime(timezone=True), nullable=False),
        sa.Column("covers_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tagged", sa.String(64), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_digests_subscriber_planned", "digests", ["subscriber_id", "planned_at", "body_key"])
    op.drop_index("ix_digests_subscriber_id", table_name="digests")


def downgrade() -> None:
    op.create_index("ix_digests_subscriber_id", "digests", ["subscriber_id"])
    op.drop_index("ix_digests_subscriber_planned", table_name="digests")
    op.drop_table("filter_rankings")
