"""ranking by taste: the TF-IDF vocabulary and a model per subscriber

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24

``taste_vocabularies`` holds the TF-IDF vocabulary fitted on the store;
``taste_models`` each subscriber's linear model over it (sparse weights).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "taste_vocabularies",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("fitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("entries", sa.Integer(), nullable=False),
        sa.Column("terms", sa.JSON(), nullable=False),
        sa.Column("idf", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "taste_models",
        sa.Column(
            "subscriber_id",
            sa.Integer(),
            sa.ForeignKey("subscribers.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("vocabulary_id", sa.Integer(), nullable=False),
        sa.Column("signals", sa.String(64), nullable=False),
        sa.Column("trained_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("intercept", sa.Float(), nullable=False),
        sa.Column("indices", sa.LargeBinary(), nullable=False),
        sa.Column("weights", sa.LargeBinary(), nullable=False),
        sa.Column("library", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("taste_models")
    op.drop_table("taste_vocabularies")
