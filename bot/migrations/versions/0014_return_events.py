"""returned mail: bounces, complaints and unsubscribe mails read from the inbox

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24

``return_events`` records what each message read from ``inbox.url`` did, once per
message (``message_key``, its SHA-256), and where ``subscribers resume`` cleared a
bounce.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "return_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("message_key", sa.String(64), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("subscriber_id", sa.Integer(), sa.ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=True),
        sa.Column("digest_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("address", sa.String(320), nullable=False, server_default=""),
        sa.Column("status", sa.String(16), nullable=False, server_default=""),
        sa.Column("diagnostic", sa.String(300), nullable=False, server_default=""),
        sa.UniqueConstraint("message_key", name="uq_return_events_message_key"),
    )
    op.create_index("ix_return_events_subscriber_id", "return_events", ["subscriber_id"])


def downgrade() -> None:
    op.drop_index("ix_return_events_subscriber_id", table_name="return_events")
    op.drop_table("return_events")
