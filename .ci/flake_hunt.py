"""Hunt the suite's flaky tests (`make flake-hunt`): run the tests most exposed to chance
(daemons, browsers, PostgreSQL, the timing tier) several times beside a CPU hog taking
one core, and print each test that failed, with how often.

Usage: python .ci/flake_hunt.py [--runs 3] [--no-hog] [--group NAME ...]

A test that fails once here is fixed or made deterministic (docs/testing.md): a test
that can fail on a slow day is a defect.  Exit 1 when any test failed, 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUPS = {
    "timing": ["-m", "timing"],
    "daemons and browsers": [
        "tests/test_daemon.py",
        "tests/test_crash.py",
        "tests/test_shared_planning.py",
        "tests/test_unsubscribe_journal.py",
        "tests/test_serve_limits.py",
        "tests/test_pages_in_a_browser.py",
        "tests/test_browser.py",
        "tests/test_leases.py",
        "tests/test_ranker_client.py",
        "tests/test_smtp_faults.py",
        "-m",
        "not timing",
        "-n",
        "2",
    ],
    # Every PostgreSQL test, the scale-out tests of several processes among them.
    "postgresql": ["-k", "postgresql or test_scale", "-m", "not timing", "-n", "2"],
}


def failures(report: Path) -> tuple[int, dict[str, str]]:
    """How many tests a JUnit XML report lists, and for each that failed or erred, its
    message's first line."""
    if not report.exists():
        return 0, {"(pytest wrote no report)": ""}
    cases = list(ET.parse(report).iter("testcase"))
    found = {}
    for case in cases:
        problem = case.find("failure")
        problem = problem if problem is not None else case.find("error")
        if problem is not None:
            said = (problem.get("message") or problem.text or "").strip().splitlines()
            found[f"{case.get('classname', '')}::{case.get('name', '')}"] = said[0][:300] if said else ""
    return len(cases), found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-hog", action="store_true", help="run without the CPU hog")
    parser.add_argument("--group", action="append", choices=sorted(GROUPS), help="only these groups")
    args = parser.parse_args()
    groups = args.group or list(GROUPS)
    hog = None if args.no_hog else subprocess.Popen([sys.executable, "-c", "while True: pass"])
    failed: Counter[str] = Counter()
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="flake-hunt-") as tmp:
            for run in range(1, args.runs + 1):
                for name in groups:
                    report = Path(tmp) / f"{run}-{name.replace(' ', '-')}.xml"
                    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
                    began = time.monotonic()
                    subprocess.run([*command, *GROUPS[name]], cwd=ROOT, env=os.environ, capture_output=True)
                    ran, these = failures(report)
                    failed.update(these.keys())
                    took = time.monotonic() - began
                    print(f"run {run}, {name}: {len(these)} of {ran} tests failed in {took:.0f} s", flush=True)
                    for test, said in these.items():
                        print(f"  {test}: {said}", flush=True)
    finally:
        if hog is not None:
            hog.kill()
    hogged = "without a hog" if args.no_hog else "beside a CPU hog"
    print(f"\n{args.runs} runs of {', '.join(groups)} {hogged}, {time.monotonic() - started:.0f} s:")
    for test, times in failed.most_common():
        print(f"  {test}: failed {times} of {args.runs}")
    if not failed:
        print("  no test failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
