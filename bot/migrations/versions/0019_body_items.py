"""digest items stored once per body, not once per subscriber

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25

What a digest shows of each entry (position, pinned summary source, why, tags,
link, taste score) moves from the ledger to ``body_items``, keyed by the
digest's ``body_key``: the subscribers of one filter get the same items on one
day, so a day of 20,000 subscribers wrote 124 MB of ledger rows that repeated a
few hundred bodies.  The ledger keeps who got which entry in which digest, and
on SQLite loses its rowid (its key is the table).

A digest with ledger rows but no body key (planned before 0006, or made by
``digest send``) gets a key of its own, ``digest-<id>``, which no hashed key
can equal.  Each body's items are copied from one of its digests.  On SQLite
the ledger is copied once (the whole table).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_ITEM_COLUMNS = "position, entry_id, summary_source_id, why, tags, url, taste"


def upgrade() -> None:
    op.create_table(
        "body_items",
        sa.Column("body_key", sa.String(length=32), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("summary_source_id", sa.Integer(), nullable=True),
        sa.Column("why", sa.Text(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("taste", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["entry_id"], ["entries.id"], name=op.f("fk_body_items_entry_id_entries"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["summary_source_id"], ["sources.id"], name=op.f("fk_body_items_summary_source_id_sources")
        ),
        sa.PrimaryKeyConstraint("body_key", "position", name=op.f("pk_body_items")),
    )
    op.create_index(op.f("ix_body_items_entry_id"), "body_items", ["entry_id"], unique=False)
    op.execute(
        "UPDATE digests SET body_key = 'digest-' || id "
        "WHERE body_key IS NULL AND EXISTS (SELECT 1 FROM ledger WHERE ledger.digest_id = digests.id)"
    )
    op.execute(
        f"INSERT INTO body_items (body_key, {_ITEM_COLUMNS}) "
        f"SELECT first.body_key, {', '.join('ledger.' + c.strip() for c in _ITEM_COLUMNS.split(','))} "
        "FROM (SELECT body_key, MIN(id) AS digest_id FROM digests WHERE body_key IS NOT NULL GROUP BY body_key) "
        "AS first JOIN ledger ON ledger.digest_id = first.digest_id"
    )
    if op.get_bind().dialect.name == "sqlite":
        _slim_sqlite_ledger()
        return
    op.drop_constraint("fk_ledger_summary_source_id_sources", "ledger", type_="foreignkey")
    for column in ("position", "summary_source_id", "why", "tags", "url", "taste"):
        op.drop_column("ledger", column)


def _slim_sqlite_ledger() -> None:
    op.create_table(
        "ledger_slim",
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("digest_id", sa.Integer(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["digest_id"], ["digests.id"], name=op.f("fk_ledger_digest_id_digests"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["entry_id"], ["entries.id"], name=op.f("fk_ledger_entry_id_entries"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("entry_id", "subscriber_id", name=op.f("pk_ledger")),
        sqlite_with_rowid=False,
    )
    op.execute(
        "INSERT INTO ledger_slim (entry_id, subscriber_id, digest_id, reported_at) "
        "SELECT entry_id, subscriber_id, digest_id, reported_at FROM ledger ORDER BY entry_id, subscriber_id"
    )
    op.drop_index("ix_ledger_digest_id", table_name="ledger")
    op.drop_table("ledger")
    op.rename_table("ledger_slim", "ledger")
    op.create_index(op.f("ix_ledger_digest_id"), "ledger", ["digest_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ledger", recreate="always", table_kwargs={"sqlite_with_rowid": True}) as batch:
        batch.add_column(sa.Column("position", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("summary_source_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("why", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("tags", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("url", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("taste", sa.Float(), nullable=True))
        batch.create_foreign_key("fk_ledger_summary_source_id_sources", "sources", ["summary_source_id"], ["id"])
    # Each ledger row's item, through its digest's body.
    for column in ("position", "summary_source_id", "why", "tags", "url", "taste"):
        op.execute(
            f"UPDATE ledger SET {column} = (SELECT body_items.{column} FROM body_items JOIN digests "
            "ON digests.body_key = body_items.body_key "
            "WHERE digests.id = ledger.digest_id AND body_items.entry_id = ledger.entry_id)"
            + (
                " WHERE EXISTS (SELECT 1 FROM body_items JOIN digests ON digests.body_key = body_items.body_key "
                "WHERE digests.id = ledger.digest_id AND body_items.entry_id = ledger.entry_id)"
                if column in ("position", "why", "tags", "url")
                else ""
            )
        )
    op.execute("UPDATE digests SET body_key = NULL WHERE body_key LIKE 'digest-%'")
    op.drop_index(op.f("ix_body_items_entry_id"), table_name="body_items")
    op.drop_table("body_items")
