"""Ingest benchmark: entries/s for a 10,000-entry dump, and whether ingest cost grows with history.

Usage: python bench/ingest.py [--entries 10000] [--history 1000000] [--batch 1000] [--pg URL]

Prints:
  * parse-only and parse+store rates (shipped tag rules applied) for one dump of --entries new
    entries into an empty store: first as the first ingest of the process (it compiles the SQL
    statements and builds the parsers' caches), then twice more as a long-running scheduler
    ingests, without and with tag rules;
  * the time to ingest --batch new entries into a store holding --batch entries and one holding
    --history entries (median of 3, fresh entries each time), and their ratio (target <= 1.3);
    each round starts from a checkpointed WAL, and the time including the checkpoint that
    writes the round's pages into the database file is printed beside it.

With --pg (a PostgreSQL URL such as $DIGESTBOT_TEST_PG) every store is a throw-away schema
in that database instead of a SQLite file, and the checkpoint is PostgreSQL's CHECKPOINT.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.choose.tagging import load_rules  # noqa: E402
from bot.ingest.formats import parse_dump  # noqa: E402
from bot.ingest.storing import ingest_bytes  # noqa: E402
from bot.store.engine import make_engine, sessions, upgrade  # noqa: E402
from tests.helpers import dump_text, postgres_schema  # noqa: E402

# The shipped tag rules run on every new entry, as in production.
RULES = load_rules(Path(__file__).resolve().parent.parent / "config" / "tags.toml")


class Stores:
    """Fresh stores: SQLite files in *folder*, or schemas of the PostgreSQL database at *pg_url*."""

    def __init__(self, folder: Path, pg_url: str | None, cleanup: contextlib.ExitStack) -> None:
        self.folder, self.pg_url, self.cleanup = folder, pg_url, cleanup

    def fresh(self, name: str):
        url = (
            self.cleanup.enter_context(postgres_schema(self.pg_url))
            if self.pg_url
            else f"sqlite:///{self.folder / name}"
        )
        engine = make_engine(url)
        self.cleanup.callback(engine.dispose)  # before its schema is dropped (the stack unwinds in reverse)
        upgrade(engine)
        return engine, sessions(engine)

    def size_mb(self, engine, name: str) -> float:
        if not self.pg_url:
            return (self.folder / name).stat().st_size / 1e6
        with engine.connect() as conn:
            return (
                float(
                    conn.exec_driver_sql(
                        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
                        " JOIN pg_namespace n ON n.oid = c.relnamespace"
                        " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                    ).scalar_one()
                )
                / 1e6
            )


def fill(factory, count: int, *, chunk: int = 20_000) -> int:
    """Ingest *count* distinct entries in dumps of *chunk*; returns the next free entry number."""
    done = 0
    started = time.perf_counter()
    while done < count:
        n = min(chunk, count - done)
        ingest_bytes(factory, dump_text(n, seed=done, start=done).encode(), name=f"history-{done}", rules=RULES)
        done += n
        if count >= 100_000 and done % 100_000 == 0:
            rate = done / (time.perf_counter() - started)
            print(f"    history: {done:,}/{count:,} entries ({rate:,.0f}/s)", file=sys.stderr)
    return done


def time_batches(engine, factory, start: int, batch: int, rounds: int = 3) -> tuple[float, float]:
    """Median (ingest, ingest + WAL checkpoint) seconds.  Each round starts with an
    empty WAL, so neither store is charged for the other's earlier pages; the second
    figure includes writing this batch's pages into the database file."""
    ingest_times, durable_times = [], []
    for r in range(rounds):
        checkpoint(engine)
        data = dump_text(batch, seed=10_000_000 + start + r, start=start + r * batch).encode()
        t0 = time.perf_counter()
        result = ingest_bytes(factory, data, name=f"batch-{start}-{r}", rules=RULES)
        t1 = time.perf_counter()
        checkpoint(engine)
        t2 = time.perf_counter()
        ingest_times.append(t1 - t0)
        durable_times.append(t2 - t0)
        assert result.new == batch, result
    return statistics.median(ingest_times), statistics.median(durable_times)


def checkpoint(engine) -> None:
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("CHECKPOINT")
        return
    raw = engine.raw_connection()  # outside any transaction: a checkpoint cannot run inside one
    try:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()


def sqlite_alone(folder: Path, rows: int, batch: int, rounds: int = 3) -> float:
    """Median ms (with the checkpoint) for SQLite alone to insert *batch* rows into a table of
    *rows*: a random 22-character unique key, as identity keys are, and 700 bytes of text, as
    an entry is.  The floor under digestbot's own figure: no parsing, no other table or index."""
    rng = random.Random(rows)
    engine = make_engine(f"sqlite:///{folder / f'alone-{rows}.sqlite3'}")  # the store's own pragmas
    raw = engine.raw_connection()

    def insert(n: int) -> None:
        raw.execute("BEGIN IMMEDIATE")
        raw.executemany(
            "INSERT INTO t (key, body) VALUES (?, ?)",
            [(f"paper:{rng.getrandbits(64):016x}", rng.randbytes(350).hex()) for _ in range(n)],
        )
        raw.execute("COMMIT")

    try:
        raw.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, body TEXT NOT NULL)")
        for done in range(0, rows, 20_000):
            insert(min(20_000, rows - done))
        times = []
        for _ in range(rounds):
            checkpoint(engine)
            t0 = time.perf_counter()
            insert(batch)
            checkpoint(engine)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000
    finally:
        raw.close()
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--pg", metavar="URL", help="PostgreSQL database for the stores (default: SQLite files)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="digestbot-bench-") as tmp, contextlib.ExitStack() as cleanup:
        stores = Stores(Path(tmp), args.pg, cleanup)
        data = dump_text(args.entries, seed=1).encode()
        print(f"dump: {args.entries:,} entries, {len(data) / 1e6:.1f} MB")

        t0 = time.perf_counter()
        parsed = parse_dump(data, "bench")
        parse_s = time.perf_counter() - t0
        assert len(parsed.entries) == args.entries

        print(f"parse only:                  {parse_s:6.3f} s  ({args.entries / parse_s:,.0f} entries/s)")
        runs = (
            ("first ingest of the process", RULES),
            ("parse + store, no tag rules", None),
            ("parse + store + tag rules", RULES),
        )
        for n, (label, rules) in enumerate(runs):
            engine, factory = stores.fresh(f"one-{n}.sqlite3")
            t0 = time.perf_counter()
            result = ingest_bytes(factory, data, name="bench", rules=rules)
            total_s = time.perf_counter() - t0
            assert result.new == args.entries, result
            engine.dispose()
            print(f"{label}: {total_s:6.3f} s  ({args.entries / total_s:,.0f} entries/s)  target <= 1 s")

        small_engine, small = stores.fresh("small.sqlite3")
        start = fill(small, args.batch)
        small_s, small_durable = time_batches(small_engine, small, start, args.batch)
        small_engine.dispose()

        print(f"filling a store with {args.history:,} entries ...", file=sys.stderr)
        big_engine, big = stores.fresh("big.sqlite3")
        start = fill(big, args.history)
        big_s, big_durable = time_batches(big_engine, big, start, args.batch)
        size_mb = stores.size_mb(big_engine, "big.sqlite3")
        big_engine.dispose()

        print(
            f"{args.batch:,} new into {args.batch:,}:       {small_s * 1000:7.1f} ms"
            f"  ({small_durable * 1000:.1f} ms with its checkpoint)"
        )
        print(
            f"{args.batch:,} new into {args.history:,}: {big_s * 1000:7.1f} ms"
            f"  ({big_durable * 1000:.1f} ms with its checkpoint;"
            f" store file {size_mb:,.0f} MB)"
        )
        print(
            f"ratio history/small: {big_s / small_s:.2f}  target <= 1.3"
            f"  (with checkpoints: {big_durable / small_durable:.2f})"
        )
        if not args.pg:
            alone_small = sqlite_alone(stores.folder, args.batch, args.batch)
            alone_big = sqlite_alone(stores.folder, args.history, args.batch)
            print(
                f"SQLite alone, {args.batch:,} random keys into {args.batch:,} vs {args.history:,} rows"
                " (with checkpoints):"
                f" {alone_small:.1f} vs {alone_big:.1f} ms, +{alone_big - alone_small:.1f} ms;"
                f" digestbot: +{(big_durable - small_durable) * 1000:.1f} ms"
            )


if __name__ == "__main__":
    main()
