"""library news: code links dated, library papers matched when their entry arrives

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26

``entries.linked_at`` says when a paper was first given a code or model link, or a
new one; ``library_papers.told_at`` when its reader was last told news of it.  A
library paper not yet matched to an entry is looked up by its key, and by
``title_key`` (the key its title alone gives), when entries arrive: two partial
indexes hold only the papers still waiting.  Planning finds who keeps the entries
with news through a partial index on ``entry_id``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

BATCH = 5000
_NOT_ALNUM = re.compile(r"[\W_]+")


def _title_key(title: str) -> str | None:
    # identity.normalize_title and identity.title_key, repeated so the migration
    # does not change with the code.
    norm = _NOT_ALNUM.sub(" ", unicodedata.normalize("NFKC", title).casefold()).strip()
    if not norm:
        return None
    hashed = int.from_bytes(hashlib.sha256(norm.encode("utf-8")).digest()[:8], "big", signed=True)
    return f"paper:{hashed & 0xFFFFFFFFFFFFFFFF:016x}"


def upgrade() -> None:
    op.add_column("entries", sa.Column("linked_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_entries_linked_at",
        "entries",
        ["linked_at"],
        unique=False,
        sqlite_where=sa.text("linked_at IS NOT NULL"),
        postgresql_where=sa.text("linked_at IS NOT NULL"),
    )
    op.add_column("library_papers", sa.Column("title_key", sa.String(length=40), nullable=True))
    op.add_column("library_papers", sa.Column("told_at", sa.DateTime(timezone=True), nullable=True))
    bind = op.get_bind()
    after = 0
    while True:
        rows = bind.execute(
            sa.text("SELECT id, title FROM library_papers WHERE id > :after ORDER BY id LIMIT :n"),
            {"after": after, "n": BATCH},
        ).all()
        if not rows:
            break
        keyed = [{"id": i, "title_key": _title_key(t)} for i, t in rows if t and _title_key(t)]
        if keyed:
            bind.execute(sa.text("UPDATE library_papers SET title_key = :title_key WHERE id = :id"), keyed)
        after = rows[-1][0]
    op.create_index(
        "ix_library_papers_entry_id",
        "library_papers",
        ["entry_id"],
        unique=False,
        sqlite_where=sa.text("entry_id IS NOT NULL"),
        postgresql_where=sa.text("entry_id IS NOT NULL"),
    )
    op.create_index(
        "ix_library_papers_unmatched_key",
        "library_papers",
        ["key"],
        unique=False,
        sqlite_where=sa.text("entry_id IS NULL"),
        postgresql_where=sa.text("entry_id IS NULL"),
    )
    op.create_index(
        "ix_library_papers_unmatched_title_key",
        "library_papers",
        ["title_key"],
        unique=False,
        sqlite_where=sa.text("entry_id IS NULL AND title_key IS NOT NULL"),
        postgresql_where=sa.text("entry_id IS NULL AND title_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_library_papers_unmatched_title_key", table_name="library_papers")
    op.drop_index("ix_library_papers_unmatched_key", table_name="library_papers")
    op.drop_index("ix_library_papers_entry_id", table_name="library_papers")
    with op.batch_alter_table("library_papers") as batch_op:
        batch_op.drop_column("told_at")
        batch_op.drop_column("title_key")
    op.drop_index("ix_entries_linked_at", table_name="entries")
    with op.batch_alter_table("entries") as batch_op:
        batch_op.drop_column("linked_at")
