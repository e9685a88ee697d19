"""retention: digests looked up by body, and what retention removed

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26

``database.keep_days`` removes old digests with their ledger rows, and the bodies
no kept digest shows.  Whether another digest still shows a body is a look-up by
``digests.body_key`` (it was a scan of every digest per body, for
``subscribers remove --purge`` too).  ``retention`` holds one row: the time before
which digests were removed, and how many, so ``history``, ``stats`` and the web
version can say what is no longer kept.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_digests_body_key",
        "digests",
        ["body_key"],
        unique=False,
        sqlite_where=sa.text("body_key IS NOT NULL"),
        postgresql_where=sa.text("body_key IS NOT NULL"),
    )
    op.create_table(
        "retention",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("removed_before", sa.DateTime(timezone=True), nullable=False),
        sa.Column("digests_removed", sa.BigInteger(), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retention")),
    )


def downgrade() -> None:
    op.drop_table("retention")
    op.drop_index("ix_digests_body_key", table_name="digests")
