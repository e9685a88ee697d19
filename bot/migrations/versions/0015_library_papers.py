"""a reader's library: the papers each subscriber vouches for

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24

``library_papers`` holds the papers a subscriber imported from a reference
manager's export, keyed as entries are, with the stored entry each one is.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "library_papers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("subscriber_id", sa.Integer(), sa.ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("entry_id", sa.Integer(), sa.ForeignKey("entries.id", ondelete="SET NULL"), nullable=True),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("abstract", sa.Text(), nullable=False, server_default=""),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("subscriber_id", "key", name="uq_library_papers_subscriber_id_key"),
    )


def downgrade() -> None:
    op.drop_table("library_papers")
