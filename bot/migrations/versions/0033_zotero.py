"""zotero: a reader's connected library, its synced items, the papers saved to it

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07

``zotero_connections`` holds one library a reader connected, with their API key sealed
by the site's secrets key (never in clear), the library version synced up to and the
connection's state; ``zotero_items`` each synced item's version and the library paper it
became; ``zotero_saves`` the papers a reader asked to save, with the write token every
attempt sends; ``zotero_save_requests`` the journal of those asks (on SQLite the journal
is a file of its own, which makes its table itself).  Nothing existing changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

_WHEN = sa.DateTime(timezone=True)


def _subscriber() -> sa.Column[int]:
    return sa.Column("subscriber_id", sa.Integer(), sa.ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False)


def upgrade() -> None:
    op.create_table(
        "zotero_connections",
        _subscriber(),
        sa.Column("library", sa.String(length=40), nullable=False),
        sa.Column("sealed_key", sa.Text(), nullable=False),
        sa.Column("can_write", sa.Boolean(), nullable=False),
        sa.Column("collections", sa.JSON(), nullable=False),
        sa.Column("save_into", sa.String(length=16), nullable=True),
        sa.Column("known_collections", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=12), nullable=False),
        sa.Column("problem", sa.Text(), nullable=True),
        sa.Column("connected_at", _WHEN, nullable=False),
        sa.Column("synced_at", _WHEN, nullable=True),
        sa.Column("tried_at", _WHEN, nullable=True),
        sa.Column("told_digest_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("subscriber_id"),
    )
    op.create_table(
        "zotero_items",
        _subscriber(),
        sa.Column("item_key", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("paper_key", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("subscriber_id", "item_key"),
    )
    op.create_index("ix_zotero_items_paper", "zotero_items", ["subscriber_id", "paper_key"])
    op.create_table(
        "zotero_saves",
        _subscriber(),
        sa.Column("entry_id", sa.Integer(), sa.ForeignKey("entries.id", ondelete="CASCADE"), nullable=False),
        sa.Column("write_token", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=12), nullable=False),
        sa.Column("item_key", sa.String(length=16), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("problem", sa.Text(), nullable=True),
        sa.Column("asked_at", _WHEN, nullable=False),
        sa.Column("tried_at", _WHEN, nullable=True),
        sa.Column("done_at", _WHEN, nullable=True),
        sa.PrimaryKeyConstraint("subscriber_id", "entry_id"),
    )
    op.create_index(
        "ix_zotero_saves_pending",
        "zotero_saves",
        ["subscriber_id"],
        postgresql_where=sa.text("state = 'pending'"),
        sqlite_where=sa.text("state = 'pending'"),
    )
    op.create_table(
        "zotero_save_requests",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("received_at", _WHEN, nullable=False),
        sa.Column("applied", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_zotero_save_requests_pending",
        "zotero_save_requests",
        ["subscriber_id"],
        postgresql_where=sa.text("NOT applied"),
        sqlite_where=sa.text("NOT applied"),
    )


def downgrade() -> None:
    op.drop_index("ix_zotero_save_requests_pending", table_name="zotero_save_requests")
    op.drop_table("zotero_save_requests")
    op.drop_index("ix_zotero_saves_pending", table_name="zotero_saves")
    op.drop_table("zotero_saves")
    op.drop_index("ix_zotero_items_paper", table_name="zotero_items")
    op.drop_table("zotero_items")
    op.drop_table("zotero_connections")
