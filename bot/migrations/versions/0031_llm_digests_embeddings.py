"""llm: a digest pins the language of its TL;DRs; each paper's embedding

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-29

A digest shows each entry's TL;DR (``entry_tldrs``) in the language its reader had
chosen when it was planned, as written by then: ``digests.language`` pins that
language (NULL: no TL;DRs, as every digest planned before this revision or without a
chat model), and the digest's ``planned_at`` the moment; a resend shows its original's.

``embeddings`` keeps one vector per paper, keyed as entries and library papers are
(``arxiv:…``, ``doi:…``), so an entry and the library paper it is share one: the
embedding model's name and the unit vector as little-endian half floats.
``embedding_models`` keeps each reader's model on them (weights as float32, and what it
was trained from).  Nothing existing changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("digests", sa.Column("language", sa.String(length=35), nullable=True))
    op.create_table(
        "embeddings",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("embedded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "embedding_models",
        sa.Column("subscriber_id", sa.Integer(), sa.ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("signal", sa.String(length=64), nullable=False),
        sa.Column("weights", sa.LargeBinary(), nullable=False),
        sa.Column("intercept", sa.Float(), nullable=False),
        sa.Column("papers", sa.Integer(), nullable=False),
        sa.Column("trained_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("subscriber_id"),
    )


def downgrade() -> None:
    op.drop_table("embedding_models")
    op.drop_table("embeddings")
    with op.batch_alter_table("digests") as batch_op:
        batch_op.drop_column("language")
