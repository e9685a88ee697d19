"""rankers: a body item names the outside ranker that placed it

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-28

With an outside ranker configured (``ranker.url``, docs/rankers.md), a digest's order
is a team-draft interleaving of the built-in ranking and the ranker's
(``bot.rankers.interleave``).  ``body_items.placed_by`` pins which of them placed each
item ("built-in" or the ranker's name), so a resend and the web version show the same
order and a reader's rating credits the ranker that placed the entry.  NULL in a
digest that was not interleaved: those bodies are what they were.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("body_items", sa.Column("placed_by", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("body_items") as batch_op:
        batch_op.drop_column("placed_by")
