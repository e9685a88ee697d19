"""What the heavy tests reach at their suite size and not at full size (`make soak-coverage`).

Usage: python .ci/soak_coverage.py [--keep DIR] [pytest arguments ...]

Runs the tests marked `soak` twice under coverage.py, with branches, in their own
processes too (the daemons and workers they start): at the suite's size, then at full size
(`DIGESTBOT_SOAK=1`, as `make soak` runs them), with one hypothesis seed for both.  Prints,
per module of bot/, the lines and branches only the full-size run reached: what shrinking
a test to its suite size would lose.  Exit 0 when nothing is lost, 1 otherwise.

A process killed with SIGKILL (the crash tests kill on purpose) writes no coverage: what
only it ran is not counted in either run.  One stopped with SIGTERM writes its coverage
as it exits (coverage's own SIGTERM handler is left off: it would take the signal before
the process sets its own, and end it with -15).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from coverage import CoverageData

ROOT = Path(__file__).resolve().parent.parent
CONFIG = """\
[run]
source = bot
branch = true
parallel = true
patch = subprocess
data_file = {data}
"""


def measured(folder: Path, *, soak: bool, pytest_args: list[str]) -> dict[str, set[tuple[int, int]]]:
    """Each file's arcs (line pairs; a line alone is (line, line)) one run of the soak tests reached."""
    folder.mkdir(parents=True, exist_ok=True)
    rc = folder / "coveragerc"
    rc.write_text(CONFIG.format(data=folder / ".coverage"))
    env = os.environ | {"COVERAGE_RCFILE": str(rc)}
    if soak:
        env["DIGESTBOT_SOAK"] = "1"
    else:
        env.pop("DIGESTBOT_SOAK", None)
    command = [sys.executable, "-m", "coverage", "run", "-m", "pytest", "-m", "soak", "-p", "no:randomly", "-q"]
    command += ["-p", "no:cacheprovider", "--hypothesis-seed=0", *pytest_args]
    size = "full size" if soak else "suite size"
    print(f"running the soak tests at their {size}: {' '.join(command[3:])}", flush=True)
    done = subprocess.run(command, cwd=ROOT, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the soak tests at their {size} failed (exit {done.returncode})")
    subprocess.run([sys.executable, "-m", "coverage", "combine", "-q"], cwd=ROOT, env=env, check=True)
    data = CoverageData(basename=str(folder / ".coverage"))
    data.read()
    reached: dict[str, set[tuple[int, int]]] = {}
    for path in data.measured_files():
        name = str(Path(path).resolve().relative_to(ROOT)) if Path(path).is_relative_to(ROOT) else path
        arcs = set(data.arcs(path) or ())
        arcs |= {(line, line) for line in data.lines(path) or ()}
        reached[name] = arcs
    return reached


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="keep each run's coverage data in this folder")
    args, pytest_args = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as scratch:
        where = args.keep or Path(scratch)
        small = measured(where / "suite", soak=False, pytest_args=pytest_args)
        full = measured(where / "soak", soak=True, pytest_args=pytest_args)
    lost = 0
    for name in sorted(full):
        only = full[name] - small.get(name, set())
        if not only:
            continue
        lost += len(only)
        lines = sorted({a for a, b in only if a == b and a > 0})
        branches = sorted(f"{a}->{b}" for a, b in only if a != b)
        print(f"{name}: lines {lines or 'none'}; branches {branches or 'none'}")
    total = sum(len(arcs) for arcs in full.values())
    print(f"reached at full size: {total:,} lines and branches; not at the suite's size: {lost:,}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
