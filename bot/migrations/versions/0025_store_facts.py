"""store facts: what a store knows of itself, such as which key signed its links

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27

``store_facts`` holds one value per name.  ``signing_key_id`` is an HMAC of a fixed
text under the key that signs the store's links (``bot.tokens.key_id``): it names the
key without revealing it, so a process that meets another key refuses to start
rather than answer every link already mailed with a 404.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "store_facts",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("store_facts")
