"""digests and the ledger

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "digests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("local_date", sa.Date(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("resend_of_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_owner", sa.String(length=64), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("message_id", sa.String(length=255), nullable=False),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.Column("pending_count", sa.Integer(), nullable=False),
        sa.Column("smtp_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("planned_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["resend_of_id"], ["digests.id"], name=op.f("fk_digests_resend_of_id_digests"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["subscriber_id"], ["subscribers.id"], name=op.f("fk_digests_subscriber_id_subscribers"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_digests")),
    )
    with op.batch_alter_table("digests", schema=None) as batch_op:
        batch_op.create_index("ix_digests_due", ["state", "next_attempt_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_digests_subscriber_id"), ["subscriber_id"], unique=False)
        batch_op.create_index(
            "uq_digests_scheduled_day",
            ["subscriber_id", "local_date"],
            unique=True,
            sqlite_where=sa.text("kind = 'scheduled'"),
            postgresql_where=sa.text("kind = 'scheduled'"),
        )
    op.create_table(
        "ledger",
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("digest_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("summary_source_id", sa.Integer(), nullable=True),
        sa.Column("why", sa.Text(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["digest_id"], ["digests.id"], name=op.f("fk_ledger_digest_id_digests"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["entry_id"], ["entries.id"], name=op.f("fk_ledger_entry_id_entries"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["subscriber_id"], ["subscribers.id"], name=op.f("fk_ledger_subscriber_id_subscribers"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["summary_source_id"], ["sources.id"], name=op.f("fk_ledger_summary_source_id_sources")
        ),
        sa.PrimaryKeyConstraint("subscriber_id", "entry_id", name=op.f("pk_ledger")),
    )
    with op.batch_alter_table("ledger", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ledger_digest_id"), ["digest_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ledger", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ledger_digest_id"))
    op.drop_table("ledger")
    with op.batch_alter_table("digests", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_digests_scheduled_day",
            sqlite_where=sa.text("kind = 'scheduled'"),
            postgresql_where=sa.text("kind = 'scheduled'"),
        )
        batch_op.drop_index(batch_op.f("ix_digests_subscriber_id"))
        batch_op.drop_index("ix_digests_due")
    op.drop_table("digests")
