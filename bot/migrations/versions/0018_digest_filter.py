"""the filter each digest was chosen with

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25

``digests.filter`` keeps the subscriber's filter as it was when the digest was
planned: its web version and a resend show that one, not the filter of today.
NULL for digests planned before (they show the subscriber's current filter).
Added in place (no table copy).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("digests", sa.Column("filter", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("digests") as batch:
        batch.drop_column("filter")
