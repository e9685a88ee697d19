"""digest body key

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22

``digests.body_key``: a hash of the digest's ledger rows (entries, pinned
summary sources, why, tags, links) in order, written by the planner.  Digests
with the same key carry the same items, so the send path reads one of them's
ledger rows and reuses them for the rest.  NULL (digests planned before this
revision, resends, manual digests made one by one): read the ledger as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("digests") as batch_op:
        batch_op.add_column(sa.Column("body_key", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("digests") as batch_op:
        batch_op.drop_column("body_key")
