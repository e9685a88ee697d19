"""subscribers

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "subscribers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("email_key", sa.String(length=320), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("filter", sa.Text(), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("send_hour", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("backfill", sa.String(length=16), nullable=False),
        sa.Column("unsubscribe_secret", sa.String(length=64), nullable=False),
        sa.Column("bounces", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_subscribers")),
        sa.UniqueConstraint("email_key", name=op.f("uq_subscribers_email_key")),
    )
    with op.batch_alter_table("subscribers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_subscribers_status"), ["status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("subscribers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_subscribers_status"))
    op.drop_table("subscribers")
