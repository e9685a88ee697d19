"""cadence, sign-up with double opt-in and its consent record

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24

``subscribers.cadence`` (daily | weekdays | weekly:<day>); ``subscribers.
mailed_at``: when the last sign-up mail (a confirmation, or "you are already
subscribed") went to the address, for the one-per-interval limit.
``consents`` records how each subscriber came to be subscribed (a sign-up and
its confirmation, or an operator's add), so an operator can prove it.
``signup_requests`` counts sign-ups per client address for the hourly limit.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscribers") as batch:
        batch.add_column(sa.Column("cadence", sa.String(16), nullable=False, server_default="daily"))
        batch.add_column(sa.Column("mailed_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "consents",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("subscriber_id", sa.Integer(), sa.ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("address", sa.String(320), nullable=False),
        sa.Column("page", sa.String(500), nullable=False, server_default=""),
        sa.Column("client", sa.String(64), nullable=False, server_default=""),
        sa.Column("detail", sa.Text(), nullable=False, server_default=""),
    )
    op.create_index("ix_consents_subscriber_id", "consents", ["subscriber_id"])
    op.create_table(
        "signup_requests",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("client", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_signup_requests_client_at", "signup_requests", ["client", "at"])


def downgrade() -> None:
    op.drop_index("ix_signup_requests_client_at", table_name="signup_requests")
    op.drop_table("signup_requests")
    op.drop_index("ix_consents_subscriber_id", table_name="consents")
    op.drop_table("consents")
    with op.batch_alter_table("subscribers") as batch:
        batch.drop_column("mailed_at")
        batch.drop_column("cadence")
