"""remember revisions of entries, and tell those who had them

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23

An arXiv ``replace`` that changes an entry's title or abstract sets
``entries.revised_at`` and ``revision_note``; the planner puts such entries,
sent earlier to a subscriber, into their next digest (``digests.updates``,
pinned for resends) and marks ``ledger.reported_at`` so each revision is told
once.  ``subscribers.send_updates`` lets a subscriber opt out.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.add_column(sa.Column("revised_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("revision_note", sa.Text(), nullable=True))
    op.create_index(
        "ix_entries_revised_at",
        "entries",
        ["revised_at"],
        sqlite_where=sa.text("revised_at IS NOT NULL"),
        postgresql_where=sa.text("revised_at IS NOT NULL"),
    )
    with op.batch_alter_table("subscribers") as batch:
        batch.add_column(sa.Column("send_updates", sa.Boolean(), nullable=False, server_default=sa.true()))
    with op.batch_alter_table("digests") as batch:
        batch.add_column(sa.Column("updates", sa.JSON(), nullable=True))
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(sa.Column("reported_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("reported_at")
    with op.batch_alter_table("digests") as batch:
        batch.drop_column("updates")
    with op.batch_alter_table("subscribers") as batch:
        batch.drop_column("send_updates")
    op.drop_index("ix_entries_revised_at", table_name="entries")
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("revision_note")
        batch.drop_column("revised_at")
