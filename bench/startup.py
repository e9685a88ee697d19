"""How long the CLI takes to start: the median of N runs of --help, --version and
`subscribers list` (a SQLite store with a few subscribers), as an operator types them.

    python bench/startup.py [--runs 15]

Run it from the checkout to measure; run it from another commit's worktree with
PYTHONPATH set to compare (bench/README.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DIGESTBOT = str(Path(sys.executable).with_name("digestbot"))


def median_seconds(arguments: list[str], runs: int, cwd: str, env: dict[str, str]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([DIGESTBOT, *arguments], cwd=cwd, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
        env["DIGESTBOT_DATABASE__URL"] = f"sqlite:///{folder}/bench.sqlite3"
        for n in range(5):
            subprocess.run(
                [DIGESTBOT, "subscribers", "add", f"r{n}@example.org"],
                cwd=folder,
                env=env,
                check=True,
                capture_output=True,
            )
        commands = {"--help": ["--help"], "--version": ["--version"], "subscribers list": ["subscribers", "list"]}
        for label, arguments in commands.items():
            try:
                seconds = median_seconds(arguments, args.runs, folder, env)
            except subprocess.CalledProcessError:
                print(f"{label:18s} (not supported here)")
                continue
            print(f"{label:18s} {seconds * 1000:6.0f} ms (median of {args.runs})")


if __name__ == "__main__":
    main()
