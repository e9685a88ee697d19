"""The standing ratios, against their budgets (`make bench-check`): a few minutes.

Usage: python bench/check.py [--only NAME ...]

Runs each benchmark small (the same scripts, fewer subscribers and entries), reads the
figure each prints, and prints it beside its budget from the table "Budgets" in
bench/README.md.  Exit 1 when any figure is over its budget (or a benchmark failed),
0 otherwise.  Ratios, not seconds: this machine's speed varies from run to run, and a
ratio is measured within one run.  Run it before a change to plan/, choose/, mail/,
delivery/, store/ or web/ lands, and put its output in the closing note (CONTRIBUTING.md).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "bench" / "README.md"


@dataclass(frozen=True, slots=True)
class Check:
    name: str  # as the budgets table names it
    command: tuple[str, ...]
    pattern: str  # the figure in what the command prints
    needs: str = ""  # a program it needs on PATH


CHECKS = (
    Check(
        "planning, history / none, 5 days",
        ("bench/plan.py", "--subscribers", "1000", "--entries", "100", "--days", "5", "--repeat", "3"),
        r"ratio history/none: ([\d.]+)",
    ),
    Check(
        "planning, history / none, 30 days",
        ("bench/plan.py", "--subscribers", "1000", "--entries", "100", "--days", "30", "--repeat", "3"),
        r"ratio history/none: ([\d.]+)",
    ),
    Check(
        "planning at the steady state / none, 10,000 subscribers",
        ("bench/plan.py", "--subscribers", "10000", "--left-overs", "--warm", "--repeat", "3"),
        r"ratio steady/none: ([\d.]+)",
    ),
    Check(
        "planning with left-overs, last days / days 26-30, 70 days",
        ("bench/years.py", "--subscribers", "300", "--entries", "100", "--days", "70", "--keep-days", "60"),
        r"last / days 26-30 ([\d.]+)",
    ),
    Check(
        "store kept after 70 days (keep_days 60), bytes a subscriber-day",
        ("bench/years.py", "--subscribers", "300", "--entries", "100", "--days", "70", "--keep-days", "60"),
        r"at the end: ([\d,]+) B a subscriber-day kept",
    ),
    Check(
        "send, end to end / smtp-source, 5,000 subscribers",
        ("bench/send.py", "--subscribers", "5000", "--baseline", "100"),
        r"end to end \(plan, then send\): [\d,]+ digests/s = ([\d.]+) x smtp-source",
        needs="smtp-sink",
    ),
    Check(
        "one-click unsubscribes during a delivery, requests/s",
        ("bench/unsubscribe.py", "--requests", "2000", "--concurrency", "100"),
        r"rate: ([\d,]+) requests/s",
    ),
    Check(
        "one-click unsubscribes during a delivery, p99 ms",
        ("bench/unsubscribe.py", "--requests", "2000", "--concurrency", "100"),
        r"p99 ([\d,]+) ms",
    ),
    Check(
        "one-click unsubscribes while the slowest upload is read, p99 during / alone",
        ("bench/upload.py", "--rounds", "5"),
        r"ratio during/alone: ([\d.]+)",
    ),
    Check(
        "ingest of a 10,000-entry dump, s",
        ("bench/ingest.py", "--entries", "10000", "--history", "10000"),
        r"parse \+ store \+ tag rules:\s+([\d.]+) s",
    ),
)


def budgets() -> dict[str, tuple[str, float]]:
    """name -> (comparison, limit) from the "Budgets" table of bench/README.md."""
    found: dict[str, tuple[str, float]] = {}
    in_table = False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            in_table = line.strip() == "## Budgets"
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if in_table and len(cells) >= 2 and (match := re.fullmatch(r"([<>]=)\s*([\d.,]+)", cells[1])):
            found[cells[0]] = (match.group(1), float(match.group(2).replace(",", "")))
    return found


def run(check: Check, outputs: dict[tuple[str, ...], str]) -> float | str:
    """The figure *check* reads, or why there is none."""
    if check.needs and shutil.which(check.needs) is None:
        return f"skipped: no {check.needs} here"
    if check.command not in outputs:  # two checks may read one run
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, *check.command], cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False
        )
        outputs[check.command] = done.stdout + f"\n[{time.monotonic() - started:.0f} s, exit {done.returncode}]"
        if done.returncode != 0:
            outputs[check.command] += "\nFAILED\n" + done.stderr[-2000:]
    found = re.search(check.pattern, outputs[check.command])
    if found is None:
        return "failed: " + outputs[check.command][-300:].replace("\n", " ")
    return float(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="the checks whose name holds any of these words")
    args = parser.parse_args()
    limits = budgets()
    outputs: dict[tuple[str, ...], str] = {}
    over = False
    for check in CHECKS:
        if args.only and not any(word in check.name for word in args.only):
            continue
        comparison, limit = limits[check.name]
        figure = run(check, outputs)
        if isinstance(figure, str):
            verdict, shown = ("SKIP" if figure.startswith("skipped") else "FAIL"), figure
        else:
            within = figure <= limit if comparison == "<=" else figure >= limit
            verdict, shown = ("ok" if within else "OVER"), f"{figure:,.3g}"
        over = over or verdict in ("OVER", "FAIL")
        print(f"{verdict:4}  {check.name}: {shown}  (budget {comparison} {limit:,g})", flush=True)
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
