"""Embeddings benchmark: what a paper's vector and a reader's model cost the store.

Usage: python bench/embeddings.py [--papers 20000] [--dimensions 256] [--readers 2000]
                                  [--database-url postgresql+psycopg://...]

Stores --papers vectors of --dimensions (as the embedding pass does: unit length, half
floats, keyed as entries are) and --readers models (float32 weights), then prints the
bytes a paper and a reader cost: on SQLite, the file's growth (pages in use); on
PostgreSQL (a database made beside --database-url's, dropped at the end), the tables'
total relation size, indexes and TOAST included.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import struct
import sys
import tempfile
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text  # noqa: E402

from bench.places import Place  # noqa: E402
from bot.domain.llm import packed  # noqa: E402
from bot.store.embeddings import save_embeddings, save_models  # noqa: E402
from bot.store.engine import make_engine, sessions, transaction, upgrade  # noqa: E402
from bot.store.schema import SubscriberRow  # noqa: E402

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def _sqlite_bytes(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free, size = (
            db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size")
        )
    return int((pages - free) * size)


def _postgres_bytes(engine, table: str) -> int:
    with engine.connect() as connection:
        connection.execute(text(f"ANALYZE {table}"))
        return int(connection.execute(text(f"SELECT pg_total_relation_size('{table}')")).scalar_one())


def measure(url: str, args: argparse.Namespace, sqlite_file: Path | None) -> None:
    engine = make_engine(url)
    upgrade(engine)
    factory = sessions(engine)
    rng = random.Random(1)
    postgres = engine.dialect.name == "postgresql"
    before = _postgres_bytes(engine, "embeddings") if postgres else _sqlite_bytes(sqlite_file)  # type: ignore[arg-type]
    with transaction(factory) as session:
        for start in range(0, args.papers, 5000):
            vectors = [
                (f"arxiv:2611.{n:05d}", packed([rng.gauss(0, 1) for _ in range(args.dimensions)]) or b"")
                for n in range(start, min(args.papers, start + 5000))
            ]
            save_embeddings(session, vectors, "bench-model", NOW)
    middle = _postgres_bytes(engine, "embeddings") if postgres else _sqlite_bytes(sqlite_file)  # type: ignore[arg-type]
    with transaction(factory) as session:
        session.execute(
            SubscriberRow.__table__.insert(),
            [
                {
                    "email": f"r{n}@example.org",
                    "email_key": f"r{n}@example.org",
                    "name": "",
                    "filter": "*",
                    "timezone": "UTC",
                    "send_hour": 8,
                    "status": "active",
                    "backfill": "7d",
                    "created_at": NOW,
                    "updated_at": NOW,
                    "unsubscribe_secret": "s",
                }
                for n in range(args.readers)
            ],
        )
        ids = [row[0] for row in session.execute(text("SELECT id FROM subscribers"))]
    weights = struct.pack(f"<{args.dimensions}f", *(rng.gauss(0, 1) for _ in range(args.dimensions)))
    rows = [
        {
            "subscriber_id": sid,
            "model": "bench-model",
            "signal": "0" * 24,
            "weights": weights,
            "intercept": 0.1,
            "papers": 5,
            "trained_at": NOW,
        }
        for sid in ids
    ]
    if postgres:
        middle_models = _postgres_bytes(engine, "embedding_models")
    else:
        middle_models = _sqlite_bytes(sqlite_file)  # type: ignore[arg-type]
    with transaction(factory) as session:
        save_models(session, rows)
    if postgres:
        after = _postgres_bytes(engine, "embedding_models")
    else:
        after = _sqlite_bytes(sqlite_file)  # type: ignore[arg-type]
    kind = "PostgreSQL" if postgres else "SQLite"
    print(
        f"{kind}: {(middle - before) / args.papers:,.0f} bytes a paper ({args.dimensions} dimensions, "
        f"{2 * args.dimensions} of them the vector); {(after - middle_models) / args.readers:,.0f} bytes "
        f"a reader's model ({4 * args.dimensions} of them the weights)"
    )
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--papers", type=int, default=20_000)
    parser.add_argument("--dimensions", type=int, default=256)
    parser.add_argument("--readers", type=int, default=2_000)
    parser.add_argument("--database-url", default="", help="also measure on this (empty) PostgreSQL database")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "embeddings.sqlite3"
        measure(f"sqlite:///{path}", args, path)
        if args.database_url:  # a database of its own beside that one, dropped at the end
            place = Place(Path(folder), args.database_url)
            try:
                measure(place.create("embeddings"), args, None)
            finally:
                place.close()


if __name__ == "__main__":
    main()
