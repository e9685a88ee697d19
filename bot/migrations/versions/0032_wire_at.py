"""delivery: when a digest's message went on the wire

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-01

``digests.wire_at`` is set, in a transaction that also proves the worker still holds the
digest's lease and the store can be written, just before the message goes on the wire,
and cleared at each claim.  A ``sending`` row with it set is never claimed again when its
lease runs out: its worker may have been answered, so it becomes ``unknown`` (a state
string like the others; no constraint lists them).  Rows from before this revision have
it NULL, as every digest not on the wire.  Going back, an ``unknown`` digest becomes
``failed``: the state the older code knows that is final too (only an operator's resend
sends it again), never one it would retry by itself.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("digests", sa.Column("wire_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.execute("UPDATE digests SET state = 'failed' WHERE state = 'unknown'")
    with op.batch_alter_table("digests") as batch_op:
        batch_op.drop_column("wire_at")
