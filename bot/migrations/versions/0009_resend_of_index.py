"""index digests by the digest they resend

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23

``resend --failed``, ``stats`` and a resend's "already on its way" check look
digests up by ``resend_of_id``.  Without an index each look-up read the whole
digests table.  Partial: only resends have it, so the index stays as small as
their number.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_digests_resend_of",
        "digests",
        ["resend_of_id"],
        sqlite_where=sa.text("resend_of_id IS NOT NULL"),
        postgresql_where=sa.text("resend_of_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_digests_resend_of", table_name="digests")
