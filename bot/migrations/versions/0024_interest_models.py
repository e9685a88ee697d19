"""interest models: a model per interest of a reader, trained by feedback shown in it

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-26

A reader of several named interests gets, besides the model of everything they
keep and rate, a model per interest they kept or rated enough of
(``bot.taste.library_service``).  ``feedback.section`` is the interest the rated entry was
shown under ('' for a digest of one interest, and for feedback given before);
``taste_models`` gains ``section`` in its key ('' for the reader's one model).
Models are made from the library and feedback alone: the table is made anew, and the
next planning pass trains them again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def _models_table(*, with_section: bool) -> None:
    key = [sa.Column("section", sa.String(60), nullable=False, server_default="")] if with_section else []
    op.create_table(
        "taste_models",
        sa.Column("subscriber_id", sa.Integer(), sa.ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False),
        *key,
        sa.Column("vocabulary_id", sa.Integer(), nullable=False),
        sa.Column("signals", sa.String(64), nullable=False),
        sa.Column("trained_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("intercept", sa.Float(), nullable=False),
        sa.Column("indices", sa.LargeBinary(), nullable=False),
        sa.Column("weights", sa.LargeBinary(), nullable=False),
        sa.Column("library", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("subscriber_id", *(["section"] if with_section else [])),
    )


def upgrade() -> None:
    op.add_column("feedback", sa.Column("section", sa.String(60), nullable=False, server_default=""))
    op.drop_table("taste_models")
    _models_table(with_section=True)


def downgrade() -> None:
    op.drop_table("taste_models")
    _models_table(with_section=False)
    with op.batch_alter_table("feedback") as batch_op:
        batch_op.drop_column("section")
