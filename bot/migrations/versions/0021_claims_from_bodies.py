"""claims from bodies: who got which entry is read from the digests' bodies

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26

The ledger kept a row per (entry, subscriber) naming the digest that carried it.
Since 0019 every digest that carries entries has a body (``body_items``) naming
them, so the row said again what ``digests.body_key`` and the body say; with its two
indexes it cost 77 bytes on PostgreSQL and was most of what a subscriber-day
stored.  The one thing only the ledger held, when a revision of the entry was last
told to the subscriber, moves to ``revision_notices`` (a row per revision told).
The index on ``digests.body_key`` gains the subscriber: the planner reads the claims
of a batch of subscribers (a range of ids) on a day's entries through it.
A digest with ledger rows and no body (none should exist since 0019) gets a body
of its entries first, so nothing it carried is offered again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "revision_notices",
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["entry_id"], ["entries.id"], name=op.f("fk_revision_notices_entry_id_entries"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["subscriber_id"],
            ["subscribers.id"],
            name=op.f("fk_revision_notices_subscriber_id_subscribers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("entry_id", "subscriber_id", name=op.f("pk_revision_notices")),
    )
    op.execute(
        "INSERT INTO revision_notices (entry_id, subscriber_id, reported_at) "
        "SELECT entry_id, subscriber_id, reported_at FROM ledger "
        "WHERE reported_at IS NOT NULL AND subscriber_id IN (SELECT id FROM subscribers)"
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    # A body named after its digest (32 characters, like a content hash): items without a why line or link.
    number = "CAST(digest_id AS TEXT)"
    key = "'ledger' || " + (f"lpad({number}, 26, '0')" if postgres else f"substr('{'0' * 26}' || {number}, -26, 26)")
    tags = "CAST('[]' AS JSON)" if postgres else "'[]'"
    op.execute(
        "INSERT INTO body_items (body_key, position, entry_id, summary_source_id, why, tags, url, taste) "
        f"SELECT {key}, ROW_NUMBER() OVER (PARTITION BY digest_id ORDER BY entry_id) - 1, entry_id, NULL, '', "
        f"{tags}, '', NULL FROM ledger WHERE digest_id IN (SELECT id FROM digests WHERE body_key IS NULL)"
    )
    op.execute(
        f"UPDATE digests SET body_key = (SELECT DISTINCT {key} FROM ledger WHERE ledger.digest_id = digests.id) "
        "WHERE body_key IS NULL AND EXISTS (SELECT 1 FROM ledger WHERE ledger.digest_id = digests.id)"
    )
    op.drop_index("ix_ledger_digest_id", table_name="ledger")
    op.drop_table("ledger")
    op.drop_index("ix_digests_body_key", table_name="digests")
    op.create_index(
        "ix_digests_body_key_subscriber_id",
        "digests",
        ["body_key", "subscriber_id"],
        unique=False,
        sqlite_where=sa.text("body_key IS NOT NULL"),
        postgresql_where=sa.text("body_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_digests_body_key_subscriber_id", table_name="digests")
    op.create_index(
        "ix_digests_body_key",
        "digests",
        ["body_key"],
        unique=False,
        sqlite_where=sa.text("body_key IS NOT NULL"),
        postgresql_where=sa.text("body_key IS NOT NULL"),
    )
    op.create_table(
        "ledger",
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
    op.create_index(op.f("ix_ledger_digest_id"), "ledger", ["digest_id"], unique=False)
    # One row per (entry, subscriber): a second claim (none should exist) keeps the first digest's.
    op.execute(
        "INSERT INTO ledger (entry_id, subscriber_id, digest_id, reported_at) "
        "SELECT b.entry_id, d.subscriber_id, MIN(d.id), "
        "(SELECT n.reported_at FROM revision_notices n "
        "WHERE n.entry_id = b.entry_id AND n.subscriber_id = d.subscriber_id) "
        "FROM digests d JOIN body_items b ON b.body_key = d.body_key "
        "GROUP BY b.entry_id, d.subscriber_id"
    )
    op.drop_table("revision_notices")
