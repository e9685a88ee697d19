"""due index ends with the digest id

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22

``ix_digests_due`` becomes (state, next_attempt_at, id): ``claim_due`` asks
for the due digests of one state in (next_attempt_at, id) order and now reads
them off the index in that order, instead of collecting and sorting every due
digest for each batch it claims.  (SQLite's index already ended with the
rowid, which is the id; PostgreSQL's did not.)
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("digests") as batch_op:
        batch_op.drop_index("ix_digests_due")
        batch_op.create_index("ix_digests_due", ["state", "next_attempt_at", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("digests") as batch_op:
        batch_op.drop_index("ix_digests_due")
        batch_op.create_index("ix_digests_due", ["state", "next_attempt_at"], unique=False)
