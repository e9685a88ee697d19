"""rankers: an interleaved digest pins its order, not a body of its own

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-28

0028 gave an interleaved digest a body of its own, each item naming the ranker that
placed it: a second body per digest asked about, a row per item written twice.  A
digest now keeps its body as planned and pins the drafted order on itself
(``digests.interleaving``, JSON: the ranker's name, the body's positions in the order
shown, the positions the ranker placed; ``bot.domain.rankers.Interleaving``).  Each
body 0028 reordered becomes its digest's body in its own order, with the positions
its outside ranker placed.  A digest whose items the built-in ranking placed every
one of names no outside ranker, so it judges none, as before.  The way back writes
such bodies again.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

BUILT_IN = "built-in"
_ITEM = "body_key, position, entry_id, summary_source_id, why, tags, url, taste, section"


def upgrade() -> None:
    op.add_column("digests", sa.Column("interleaving", sa.Text(), nullable=True))
    conn = op.get_bind()
    placed: dict[str, list[str | None]] = defaultdict(list)
    for key, ranker in conn.execute(
        sa.text(
            "SELECT body_key, placed_by FROM body_items WHERE body_key IN "
            "(SELECT body_key FROM body_items WHERE placed_by IS NOT NULL) ORDER BY body_key, position"
        )
    ):
        placed[key].append(ranker)
    drafts = []
    for key, rankers in placed.items():
        outside = {r for r in rankers if r not in (None, BUILT_IN)}
        if len(outside) == 1:
            (ranker,) = outside
            theirs = [n for n, r in enumerate(rankers) if r == ranker]
            order = list(range(len(rankers)))
            drafts.append({"key": key, "drafted": json.dumps({"ranker": ranker, "order": order, "theirs": theirs})})
    if drafts:
        conn.execute(sa.text("UPDATE digests SET interleaving = :drafted WHERE body_key = :key"), drafts)
    with op.batch_alter_table("body_items") as batch_op:
        batch_op.drop_column("placed_by")


def downgrade() -> None:
    op.add_column("body_items", sa.Column("placed_by", sa.String(length=40), nullable=True))
    conn = op.get_bind()
    digests = conn.execute(
        sa.text(
            "SELECT id, body_key, interleaving FROM digests WHERE interleaving IS NOT NULL AND body_key IS NOT NULL"
        )
    ).all()
    written: set[str] = set()
    for digest_id, key, drafted in digests:
        size = conn.execute(sa.text("SELECT COUNT(*) FROM body_items WHERE body_key = :key"), {"key": key}).scalar()
        try:  # what a restored backup holds may be anything
            pinned = json.loads(drafted)
            order, theirs, ranker = list(pinned["order"]), set(pinned["theirs"]), str(pinned["ranker"])[:40]
            if not all(type(n) is int for n in order) or sorted(order) != list(range(size or 0)):
                continue  # not an interleaving of this body: the digest keeps its body's order
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
        reordered = hashlib.blake2b(f"{key} {drafted}".encode(), digest_size=16).hexdigest()
        if reordered not in written:
            written.add(reordered)
            conn.execute(
                sa.text(
                    f"INSERT INTO body_items ({_ITEM}, placed_by) SELECT :reordered, :position, "
                    f"{_ITEM.split(', ', 2)[2]}, :ranker FROM body_items WHERE body_key = :key AND position = :was"
                ),
                [
                    {
                        "reordered": reordered,
                        "position": position,
                        "ranker": ranker if was in theirs else BUILT_IN,
                        "key": key,
                        "was": was,
                    }
                    for position, was in enumerate(order)
                ],
            )
        conn.execute(sa.text("UPDATE digests SET body_key = :new WHERE id = :id"), {"new": reordered, "id": digest_id})
    for key in {key for _, key, _ in digests}:  # a body planned and then reordered shows nowhere now
        conn.execute(
            sa.text(
                "DELETE FROM body_items WHERE body_key = :key AND NOT EXISTS "
                "(SELECT 1 FROM digests WHERE body_key = :key)"
            ),
            {"key": key},
        )
    with op.batch_alter_table("digests") as batch_op:
        batch_op.drop_column("interleaving")
