"""title look-ups through the key index where the key is the title hash

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

``entries.title_hash`` becomes NULL where ``key`` already is ``paper:<hash>``
of the same normalized title, and for repositories (never matched by title);
its index becomes partial.  Ingest then touches one random index page per new
dump paper instead of two.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BATCH = 5000


def _key_of(title_hash: int) -> str:
    # identity.title_key, repeated so the migration does not change with the code.
    return f"paper:{title_hash & 0xFFFFFFFFFFFFFFFF:016x}"


def _hash_of(title_norm: str) -> int:
    # identity.title_hash, repeated for the same reason.
    return int.from_bytes(hashlib.sha256(title_norm.encode("utf-8")).digest()[:8], "big", signed=True)


def upgrade() -> None:
    with op.batch_alter_table("entries") as batch_op:
        batch_op.drop_index("ix_entries_title_hash")
        batch_op.alter_column("title_hash", existing_type=sa.BigInteger(), nullable=True)
    bind = op.get_bind()
    bind.execute(sa.text("UPDATE entries SET title_hash = NULL WHERE kind <> 'paper'"))
    after = 0
    while True:
        rows = bind.execute(
            sa.text(
                "SELECT id, key, title_hash FROM entries WHERE id > :after AND key LIKE 'paper:%' "
                "AND title_hash IS NOT NULL ORDER BY id LIMIT :n"
            ),
            {"after": after, "n": BATCH},
        ).all()
        if not rows:
            break
        same = [{"id": i} for i, key, h in rows if key == _key_of(h)]
        if same:
            bind.execute(sa.text("UPDATE entries SET title_hash = NULL WHERE id = :id"), same)
        after = rows[-1][0]
    op.create_index(
        "ix_entries_title_hash",
        "entries",
        ["title_hash"],
        sqlite_where=sa.text("title_hash IS NOT NULL"),
        postgresql_where=sa.text("title_hash IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_entries_title_hash", table_name="entries")
    bind = op.get_bind()
    after = 0
    while True:
        rows = bind.execute(
            sa.text("SELECT id, title_norm FROM entries WHERE id > :after AND title_hash IS NULL ORDER BY id LIMIT :n"),
            {"after": after, "n": BATCH},
        ).all()
        if not rows:
            break
        values = [{"id": i, "h": _hash_of(title_norm)} for i, title_norm in rows]
        bind.execute(sa.text("UPDATE entries SET title_hash = :h WHERE id = :id"), values)
        after = rows[-1][0]
    with op.batch_alter_table("entries") as batch_op:
        batch_op.alter_column("title_hash", existing_type=sa.BigInteger(), nullable=False)
        batch_op.create_index("ix_entries_title_hash", ["title_hash"])
