"""feedback from the digest, a reader's threshold, the taste score each entry was planned with

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25

``feedback`` holds each subscriber's "more like this" / "less like this" on an
entry; ``subscribers.taste_threshold`` the taste score above which an entry is
``liked``; ``ledger.taste`` the score an entry had when it was planned (its
digest's "Top picks").  Both columns are added in place (no table copy).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "feedback",
        sa.Column("subscriber_id", sa.Integer(), sa.ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("entry_id", sa.Integer(), sa.ForeignKey("entries.id", ondelete="CASCADE"), nullable=False),
        sa.Column("verdict", sa.String(8), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("subscriber_id", "entry_id", name="pk_feedback"),
    )
    op.create_index("ix_feedback_entry_id", "feedback", ["entry_id"])
    op.add_column("subscribers", sa.Column("taste_threshold", sa.Float(), nullable=False, server_default="0.1"))
    op.add_column("ledger", sa.Column("taste", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("taste")
    with op.batch_alter_table("subscribers") as batch:
        batch.drop_column("taste_threshold")
    op.drop_index("ix_feedback_entry_id", table_name="feedback")
    op.drop_table("feedback")
