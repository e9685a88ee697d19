"""Ingest benchmark: entries/s for a 10,000-entry dump, and whether ingest cost grows with history.

Usage: python bench/ingest.py [--entries 10000] [--history 1000000] [--batch 1000]

Prints:
  * parse-only and parse+store rates (shipped tag rules applied) for one dump of --entries new
    entries into an empty store;
  * the time to ingest --batch new entries into a store holding --batch entries and one holding
    --history entries (median of 3, fresh entries each time), and their ratio (target <= 1.3).
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


def time_batches(factory, start: int, batch: int, rounds: int = 3) -> float:  # type: ignore[no-untyped-def]
    times = []
    for r in range(rounds):
        data = dump_text(batch, seed=10_000_000 + start + r, start=start + r * batch).encode()
        t0 = time.perf_counter()
        result = ingest_bytes(factory, data, name=f"batch-{start}-{r}", rules=RULES)
        times.append(time.perf_counter() - t0)
        assert result.new == batch, result
    return statistics.median(times)


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
        for label, rules in (("parse + store, no tag rules", None), ("parse + store + tag rules", RULES)):
            engine, factory = fresh_store(folder, f"one-{rules is None}.sqlite3")
            t0 = time.perf_counter()
            result = ingest_bytes(factory, data, name="bench", rules=rules)
            total_s = time.perf_counter() - t0
            assert result.new == args.entries, result
            engine.dispose()
            print(f"{label}: {total_s:6.3f} s  ({args.entries / total_s:,.0f} entries/s)  target <= 1 s")

        small_engine, small = fresh_store(folder, "small.sqlite3")
        start = fill(small, args.batch)
        small_s = time_batches(small, start, args.batch)
        small_engine.dispose()

        print(f"filling a store with {args.history:,} entries ...", file=sys.stderr)
        big_engine, big = fresh_store(folder, "big.sqlite3")
        start = fill(big, args.history)
        big_s = time_batches(big, start, args.batch)
        big_engine.dispose()
        size_mb = (folder / "big.sqlite3").stat().st_size / 1e6

        print(f"{args.batch:,} new into {args.batch:,}:       {small_s * 1000:7.1f} ms")
        print(f"{args.batch:,} new into {args.history:,}: {big_s * 1000:7.1f} ms  (store file {size_mb:,.0f} MB)")
        print(f"ratio history/small: {big_s / small_s:.2f}  target <= 1.3")


if __name__ == "__main__":
    main()
