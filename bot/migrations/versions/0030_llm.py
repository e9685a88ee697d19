"""llm: each entry's TL;DR per language, a reader's language, the day's spending

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-29

With ``[llm]`` naming a chat model (docs/llm.md), each entry's TL;DR is asked once per
language readers chose and kept in ``entry_tldrs`` with the model that wrote it and
when; ``subscribers.language`` is a reader's choice (NULL: the operator's first
language); ``llm_usage`` counts each UTC day's requests and reported tokens against the
daily budget.  Nothing existing changes: a store without a model keeps the tables empty.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "entry_tldrs",
        sa.Column("entry_id", sa.Integer(), sa.ForeignKey("entries.id", ondelete="CASCADE"), nullable=False),
        sa.Column("language", sa.String(length=35), nullable=False),
        sa.Column("text", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("entry_id", "language"),
    )
    op.create_table(
        "llm_usage",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("day"),
    )
    with op.batch_alter_table("subscribers") as batch_op:
        batch_op.add_column(sa.Column("language", sa.String(length=35), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("subscribers") as batch_op:
        batch_op.drop_column("language")
    op.drop_table("llm_usage")
    op.drop_table("entry_tldrs")
