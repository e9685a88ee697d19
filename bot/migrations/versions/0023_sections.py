"""sections: a body item names the reader's interest it is shown under

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26

A filter may name several interests ("Spiking hardware: snn; Serving: llm and
serving", ``bot.choose.filters.sections_of``); a digest groups its entries by them,
each entry once.  ``body_items.section`` pins the interest each item was shown
under, so a resend and the web version group it the same.  NULL for a filter of one
interest: those bodies are what they were.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("body_items", sa.Column("section", sa.String(length=60), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("body_items") as batch_op:
        batch_op.drop_column("section")
