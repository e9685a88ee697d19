"""ledger keyed entry first

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22

The ledger's primary key becomes (entry_id, subscriber_id): planning writes a
day's rows for that day's entries, which now sit together at the end of the
index instead of one page per subscriber across an index as big as the
history.  The foreign key from ``subscriber_id`` to subscribers goes: it would
need an index led by ``subscriber_id`` (the very one this drops) for deleting a
subscriber, and the rows already go with their digest, which goes with its
subscriber.  On SQLite the table is copied (once, the whole ledger).
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ledger", recreate="always") as batch_op:
        batch_op.drop_constraint("fk_ledger_subscriber_id_subscribers", type_="foreignkey")
        batch_op.drop_constraint("pk_ledger", type_="primary")
        batch_op.create_primary_key("pk_ledger", ["entry_id", "subscriber_id"])


def downgrade() -> None:
    with op.batch_alter_table("ledger", recreate="always") as batch_op:
        batch_op.drop_constraint("pk_ledger", type_="primary")
        batch_op.create_primary_key("pk_ledger", ["subscriber_id", "entry_id"])
        batch_op.create_foreign_key(
            "fk_ledger_subscriber_id_subscribers", "subscribers", ["subscriber_id"], ["id"], ondelete="CASCADE"
        )
