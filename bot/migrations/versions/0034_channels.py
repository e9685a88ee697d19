"""channels: chat rooms digests are posted to, and each part of their digests

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07

``channels`` holds a chat room a digest is posted to: its name, its service, its
destination sealed by the site's secrets key (never in clear) and the subscriber row
whose choices it has; ``channel_parts`` each message of a channel's digest with its
state and the service's last answer.  Nothing existing changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

_WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "channels",
        sa.Column("subscriber_id", sa.Integer(), sa.ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("service", sa.String(length=16), nullable=False),
        sa.Column("sealed_destination", sa.Text(), nullable=False),
        sa.Column("shown", sa.String(length=200), nullable=False),
        sa.Column("held_until", _WHEN, nullable=True),
        sa.Column("created_at", _WHEN, nullable=False),
        sa.PrimaryKeyConstraint("subscriber_id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "channel_parts",
        sa.Column("digest_id", sa.Integer(), sa.ForeignKey("digests.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=12), nullable=False),
        sa.Column("transaction_id", sa.String(length=80), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("code", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("updated_at", _WHEN, nullable=False),
        sa.PrimaryKeyConstraint("digest_id", "number"),
    )


def downgrade() -> None:
    op.drop_table("channel_parts")
    op.drop_table("channels")
