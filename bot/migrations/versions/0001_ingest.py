"""ingest: sources, feeds, entries, appearances, tags

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "feeds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("etag", sa.Text(), nullable=True),
        sa.Column("last_modified", sa.Text(), nullable=True),
        sa.Column("last_fetched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feeds")),
        sa.UniqueConstraint("url", name=op.f("uq_feeds_url")),
    )
    op.create_table(
        "sources",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("origin", sa.String(length=8), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=True),
        sa.Column("format", sa.String(length=16), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("entries_count", sa.Integer(), nullable=False),
        sa.Column("new_count", sa.Integer(), nullable=False),
        sa.Column("updated_count", sa.Integer(), nullable=False),
        sa.Column("duplicate_of_id", sa.Integer(), nullable=True),
        sa.Column("ingested_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["duplicate_of_id"], ["sources.id"], name=op.f("fk_sources_duplicate_of_id_sources")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sources")),
    )
    with op.batch_alter_table("sources", schema=None) as batch_op:
        batch_op.create_index("ix_sources_path_stamp", ["path", "size", "mtime_ns"], unique=False)
        batch_op.create_index(
            "uq_sources_ingested_sha256",
            ["sha256"],
            unique=True,
            sqlite_where=sa.text("status = 'ingested'"),
            postgresql_where=sa.text("status = 'ingested'"),
        )

    op.create_table(
        "tags",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("label", sa.String(length=100), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tags")),
        sa.UniqueConstraint("name", name=op.f("uq_tags_name")),
    )
    op.create_table(
        "entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("title_norm", sa.Text(), nullable=False),
        sa.Column("title_hash", sa.BigInteger(), nullable=False),
        sa.Column("authors", sa.JSON(), nullable=False),
        sa.Column("published", sa.Date(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("summary_type", sa.String(length=32), nullable=False),
        sa.Column("summary_source_id", sa.Integer(), nullable=True),
        sa.Column("links", sa.JSON(), nullable=False),
        sa.Column("arxiv_id", sa.String(length=40), nullable=True),
        sa.Column("doi", sa.String(length=200), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("first_seen_source_id", sa.Integer(), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["first_seen_source_id"], ["sources.id"], name=op.f("fk_entries_first_seen_source_id_sources")
        ),
        sa.ForeignKeyConstraint(
            ["summary_source_id"], ["sources.id"], name=op.f("fk_entries_summary_source_id_sources")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_entries")),
        sa.UniqueConstraint("key", name=op.f("uq_entries_key")),
    )
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_entries_first_seen_at"), ["first_seen_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_entries_title_hash"), ["title_hash"], unique=False)
        batch_op.create_index(
            "uq_entries_arxiv_id",
            ["arxiv_id"],
            unique=True,
            sqlite_where=sa.text("arxiv_id IS NOT NULL"),
            postgresql_where=sa.text("arxiv_id IS NOT NULL"),
        )
        batch_op.create_index(
            "uq_entries_doi",
            ["doi"],
            unique=True,
            sqlite_where=sa.text("doi IS NOT NULL"),
            postgresql_where=sa.text("doi IS NOT NULL"),
        )

    op.create_table(
        "entry_appearances",
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["entry_id"], ["entries.id"], name=op.f("fk_entry_appearances_entry_id_entries"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["source_id"], ["sources.id"], name=op.f("fk_entry_appearances_source_id_sources"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("entry_id", "source_id", name=op.f("pk_entry_appearances")),
    )
    with op.batch_alter_table("entry_appearances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_entry_appearances_source_id"), ["source_id"], unique=False)

    op.create_table(
        "entry_tags",
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("tag_id", sa.Integer(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["entry_id"], ["entries.id"], name=op.f("fk_entry_tags_entry_id_entries"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["tag_id"], ["tags.id"], name=op.f("fk_entry_tags_tag_id_tags"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("entry_id", "tag_id", "origin", name=op.f("pk_entry_tags")),
    )
    with op.batch_alter_table("entry_tags", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_entry_tags_tag_id"), ["tag_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("entry_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_entry_tags_tag_id"))

    op.drop_table("entry_tags")
    with op.batch_alter_table("entry_appearances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_entry_appearances_source_id"))

    op.drop_table("entry_appearances")
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_entries_doi", sqlite_where=sa.text("doi IS NOT NULL"), postgresql_where=sa.text("doi IS NOT NULL")
        )
        batch_op.drop_index(
            "uq_entries_arxiv_id",
            sqlite_where=sa.text("arxiv_id IS NOT NULL"),
            postgresql_where=sa.text("arxiv_id IS NOT NULL"),
        )
        batch_op.drop_index(batch_op.f("ix_entries_title_hash"))
        batch_op.drop_index(batch_op.f("ix_entries_first_seen_at"))

    op.drop_table("entries")
    op.drop_table("tags")
    with op.batch_alter_table("sources", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_sources_ingested_sha256",
            sqlite_where=sa.text("status = 'ingested'"),
            postgresql_where=sa.text("status = 'ingested'"),
        )
        batch_op.drop_index("ix_sources_path_stamp")

    op.drop_table("sources")
    op.drop_table("feeds")
