"""Ingest benchmark: entries/s for a 10,000-entry dump, and whether ingest cost grows with history.

Usage: python bench/ingest.py [--entries 10000] [--history 1000000] [--batch 1000]

Prints:
  * parse-only and parse+store rates (shipped tag rules applied) for one dump of --entries new
    entries into an empty store: first as the first ingest of the process (it compiles the SQL
    statements and builds the parsers' caches), then twice more as a long-running scheduler
    ingests, without and with tag rules;
  * the time to ingest --batch new entries into a store holding --batch entries and one holding
    --history entries (median of 3, fresh entries each time), and their ratio (target <= 1.3);
    each round starts from a checkpointed WAL, and the time including the checkpoint that
    writes the round's pages into the database file is printed beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gen import dump_text  # noqa: E402
from bot.ingest import ingest_bytes  # noqa: E402
from bot.sources import parse_dump  # noqa: E402
from bot.store.engine import make_engine, sessions, upgrade  # noqa: E402
from bot.tagging import load_rules  # noqa: E402

# The shipped tag rules run on every new entry, as in production.
RULES = load_rules(Path(__file__).resolve().parent.parent / "config" / "tags.toml")


def fresh_store(folder: Path, name: str):  # type: ignore[no-untyped-def]
    engine = make_engine(f"sqlite:///{folder / name}")
    upgrade(engine)
    return engine, sessions(engine)


def fill(factory, count: int, *, chunk: int = 20_000) -> int:  # type: ignore[no-untyped-def]
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


def time_batches(engine, factory, start: int, batch: int, rounds: int = 3) -> tuple[float, float]:  # type: ignore[no-untyped-def]
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


def checkpoint(engine) -> None:  # type: ignore[no-untyped-def]
    raw = engine.raw_connection()  # outside any transaction: a checkpoint cannot run inside one
    try:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="digestbot-bench-") as tmp:
        folder = Path(tmp)
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
            engine, factory = fresh_store(folder, f"one-{n}.sqlite3")
            t0 = time.perf_counter()
            result = ingest_bytes(factory, data, name="bench", rules=rules)
            total_s = time.perf_counter() - t0
            assert result.new == args.entries, result
            engine.dispose()
            print(f"{label}: {total_s:6.3f} s  ({args.entries / total_s:,.0f} entries/s)  target <= 1 s")

        small_engine, small = fresh_store(folder, "small.sqlite3")
        start = fill(small, args.batch)
        small_s, small_durable = time_batches(small_engine, small, start, args.batch)
        small_engine.dispose()

        print(f"filling a store with {args.history:,} entries ...", file=sys.stderr)
        big_engine, big = fresh_store(folder, "big.sqlite3")
        start = fill(big, args.history)
        big_s, big_durable = time_batches(big_engine, big, start, args.batch)
        big_engine.dispose()
        size_mb = (folder / "big.sqlite3").stat().st_size / 1e6

        print(f"{args.batch:,} new into {args.batch:,}:       {small_s * 1000:7.1f} ms  ({small_durable * 1000:.1f} ms with its checkpoint)")
        print(
            f"{args.batch:,} new into {args.history:,}: {big_s * 1000:7.1f} ms  ({big_durable * 1000:.1f} ms with its checkpoint;"
            f" store file {size_mb:,.0f} MB)"
        )
        print(f"ratio history/small: {big_s / small_s:.2f}  target <= 1.3  (with checkpoints: {big_durable / small_durable:.2f})")


if __name__ == "__main__":
    main()
