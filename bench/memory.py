"""Peak memory of ingesting one file, against the README's bound.

Usage: python bench/memory.py [--scale 1.0]

For each shape (a real-looking dump, millions of one-letter blocks, one entry
whose summary is millions of paragraphs, tiny entries up to the block limit) it
writes the file, ingests it into a fresh SQLite store in a child process and
prints how far the child's peak RSS grew, per MB of file and per entry, and the
README's bound: 8 x the file's size + 3 KB per entry stored.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import INGEST_MEMORY_PROBE, dump_text  # noqa: E402


def shapes(scale: float) -> dict[str, Callable[[], bytes]]:
    mb = int(1_000_000 * scale)
    return {
        "10,000 real-looking entries": lambda: dump_text(int(10_000 * scale), seed=1).encode(),
        "40,000 real-looking entries": lambda: dump_text(int(40_000 * scale), seed=2).encode(),
        "31.8 MB of 'a\\n\\n' blocks": lambda: b"a\n\n" * (int(31.8 * mb) // 3),
        "one entry, 31.8 MB summary": lambda: b"T\n\nAda 2026-06-14\n\n" + b"a\n\n" * (int(31.8 * mb) // 3) + b"PDF\n",
        "tiny entries (block limit)": lambda: b"".join(
            b"T%d\n\nA 2026-06-14\n\ns\n\nPDF\n\n" % i for i in range(int(99_000 * scale))
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="shrink or grow every shape")
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    print(f"{'shape':32} {'file':>8} {'status':>9} {'entries':>8} {'growth':>9} {'x file':>7} {'bound':>9}")
    for name, make in shapes(args.scale).items():
        with tempfile.TemporaryDirectory() as folder:
            dump = Path(folder) / "dump.txt"
            dump.write_bytes(make())
            size = dump.stat().st_size
            proc = subprocess.run(
                [sys.executable, "-c", INGEST_MEMORY_PROBE, str(dump), str(Path(folder) / "s.sqlite3")],
                capture_output=True,
                text=True,
                cwd=root,
                check=True,
            )
        measured = json.loads(proc.stdout)
        bound = 8 * size + 3000 * measured["entries"]
        status = measured["status"].rsplit(".", 1)[-1].lower()
        print(
            f"{name:32} {size / 1e6:7.1f}M {status:>9} {measured['entries']:8,} "
            f"{measured['growth'] / 1e6:8.0f}M {measured['growth'] / size:7.1f} {bound / 1e6:8.0f}M"
            f"{'' if measured['growth'] <= bound else '  OVER'}"
        )


if __name__ == "__main__":
    main()
