"""How long the CLI takes to start: the median of N runs of --help, --version and
`subscribers list` (a store with a few subscribers: a SQLite file, or the database
--database names), as an operator types them, and of the floors under them: a Python
that only imports the libraries a store command needs, and a Python that imports
nothing (the day's speed: each figure is also printed as a multiple of it, which is
what docs/cli.md quotes, since the milliseconds move with the machine's load).

    python bench/startup.py [--runs 15] [--database postgresql+psycopg://user@host/db]

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
# What every store command imports before a line of digestbot runs: the CLI toolkit,
# the settings' validation and the store's ORM (with the dialect its indexes name).
LIBRARIES = "import typer, rich.table, pydantic_settings, sqlalchemy.orm, sqlalchemy.dialects.postgresql"


def median_seconds(command: list[str], runs: int, cwd: str, env: dict[str, str]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def fresh_schema(url: str) -> str:
    """*url* with its search path set to a schema of the bench's own, made empty."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        connection.execute(text(f"CREATE SCHEMA {SCHEMA}"))
    engine.dispose()
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{SCHEMA}"


SCHEMA = "bench_startup"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--database", help="a PostgreSQL URL (the bench works in a schema of its own); default SQLite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
        env["DIGESTBOT_DATABASE__URL"] = (
            fresh_schema(args.database) if args.database else f"sqlite:///{folder}/bench.sqlite3"
        )
        if args.database:
            subprocess.run([DIGESTBOT, "db", "upgrade"], cwd=folder, env=env, check=True, capture_output=True)
        for n in range(5):
            subprocess.run(
                [DIGESTBOT, "subscribers", "add", f"r{n}@example.org"],
                cwd=folder,
                env=env,
                check=True,
                capture_output=True,
            )
        commands = {
            "--help": [DIGESTBOT, "--help"],
            "--version": [DIGESTBOT, "--version"],
            "subscribers list": [DIGESTBOT, "subscribers", "list"],
            "libraries alone": [sys.executable, "-c", LIBRARIES],
        }
        bare = median_seconds([sys.executable, "-c", "pass"], args.runs, folder, env)
        print(f"{'python alone':18s} {bare * 1000:6.0f} ms (median of {args.runs}): the day's speed")
        for label, command in commands.items():
            try:
                seconds = median_seconds(command, args.runs, folder, env)
            except subprocess.CalledProcessError:
                print(f"{label:18s} (not supported here)")
                continue
            print(f"{label:18s} {seconds * 1000:6.0f} ms (median of {args.runs}), {seconds / bare:4.1f} x python alone")


if __name__ == "__main__":
    main()
