"""Subscriber CSV import benchmark: 10,000 rows, 3 % of them bad.

Usage: python bench/import_csv.py [--rows 10000]
Prints the import time, rows/s and the counts; the acceptance target is "seconds".
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.config import Settings  # noqa: E402
from bot.store.engine import make_engine, sessions, upgrade  # noqa: E402
from bot.subscribers.csv_io import import_csv  # noqa: E402

FILTERS = ["*", "gpu and llm", "snn or fpga", '"sparse attention" or "kv cache"', "moe or rl", "gpu and not snn"]


def make_csv(rows: int) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["email", "name", "filter", "timezone", "send_hour"])
    for i in range(rows):
        if i % 100 < 3:
            writer.writerow([f"broken{i}@@example.org", f"Name {i}", "*", "UTC", 8])
        else:
            writer.writerow([f"user{i}@example.org", f"Name {i}", FILTERS[i % len(FILTERS)], "Europe/Berlin", i % 24])
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    text = make_csv(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'bench.sqlite3'}")
        upgrade(engine)
        factory = sessions(engine)
        for label in ("first import", "re-import (all updates)"):
            t0 = time.perf_counter()
            report = import_csv(factory, Settings(), text, datetime.now(UTC))
            elapsed = time.perf_counter() - t0
            print(
                f"{label:24s} {elapsed:6.2f} s ({args.rows / elapsed:,.0f} rows/s): "
                f"{report.created} added, {report.updated} updated, {report.unchanged} unchanged, "
                f"{len(report.errors)} bad rows"
            )


if __name__ == "__main__":
    main()
