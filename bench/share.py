"""Planning shared by processes on PostgreSQL: does a pass scale with the processes that plan it?

Usage: python bench/share.py --database-url postgresql+psycopg://... [--subscribers 100000]
                             [--entries 300] [--days 30] [--processes 2] [--no-history]

One store at the steady state, built as `bench/plan.py --left-overs` builds it (--days
days of left-overs, watermarks and kept rankings; --no-history: none), with today's
dump read, then vacuumed and analyzed as autovacuum would have over those days.  Then,
for one process and for --processes processes, each on a fresh copy of the store (a
template): a pass opened as the scheduler's leader opens it, and that many new
processes planning its slices as every scheduler and worker does
(``bot.plan.shared.plan_shared``), started together once all have imported.  Prints the
wall time from that start to the last one's end, each process's CPU seconds, slices,
digests and peak RSS (VmHWM), PostgreSQL's CPU seconds over the run (its processes'
user and system time, with what its ended backends used), and the speed-up (target:
at least 1.5 with two processes on this 2-core machine).  Every pass is a new
process's first.  The two runs must queue the same number of digests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select  # noqa: E402

from bench.places import Place  # noqa: E402
from bench.plan import store, write_history  # noqa: E402
from bench.send import DAY, RULES, zipf_choices  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.ingest.storing import ingest_bytes  # noqa: E402
from bot.plan.shared import FRESH_FOR  # noqa: E402
from bot.store.derived_tables import PlanningSlice  # noqa: E402
from bot.store.engine import make_engine, sessions, transaction  # noqa: E402
from bot.store.planning_slices import open_slices  # noqa: E402
from tests.helpers import dump_text, filter_expressions  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

PLANNER = """
import json, resource, sys, time
from bench.send import DAY, RULES
from bot.config import Settings
from bot.plan.shared import plan_shared
from bot.store.engine import make_engine, sessions
url, var, name = sys.argv[1:4]
settings = Settings.model_validate({"paths": {"var_dir": var}})
factory = sessions(make_engine(url))
print("ready", flush=True)
sys.stdin.readline()
started = time.perf_counter()
report = plan_shared(factory, settings, RULES, now=DAY, by=name, opens=False)
seconds = time.perf_counter() - started
use = resource.getrusage(resource.RUSAGE_SELF)
peak = max(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({"seconds": seconds, "digests": len(report.planned), "cpu": use.ru_utime + use.ru_stime,
                  "peak_kb": peak}))
"""


def postgres_cpu_seconds() -> float:
    """User and system seconds of this machine's PostgreSQL processes, with those of the
    children they reaped (each ended backend's)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name.startswith("postgres"):
            total += sum(int(fields[n]) for n in (11, 12, 13, 14))  # utime stime cutime cstime
    return total / tick


def steady_store(place: Place, filters: list[str], days: int, entries: int, settings: Settings) -> None:
    """The store "steady": *days* days at the steady state (none: day one) and today's
    dump, settled."""
    engine, factory = store(place, "steady", filters, days)
    if days:
        write_history(factory, filters, days, entries, settings)
    today = dump_text(entries, seed=3).encode()
    ingest_bytes(factory, today, name="today", now=DAY - timedelta(hours=2), rules=RULES)
    engine.dispose()
    place.settle("steady")


def shared_pass(place: Place, processes: int, folder: Path, *, keep: bool = False) -> dict[str, object]:
    """One pass over a fresh copy of the store, planned by *processes* new processes
    (the copy, ``pass<processes>``, kept with *keep*: ``bench/day.py`` sends from it)."""
    name = f"pass{processes}"
    url = place.copy("steady", name)
    engine = make_engine(url)
    factory = sessions(engine)
    with transaction(factory) as session:
        assert open_slices(session, DAY, 1000, fresh_after=DAY - FRESH_FOR)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", PLANNER, url, str(folder / "var"), f"p{n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for n in range(processes)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    database_before = postgres_cpu_seconds()
    started = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    results = []
    for child in children:
        out, _ = child.communicate()
        assert child.returncode == 0, out
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - started
    database = postgres_cpu_seconds() - database_before
    with factory() as session:
        slices = dict(
            session.execute(select(PlanningSlice.done_by, func.count()).group_by(PlanningSlice.done_by)).all()
        )
    engine.dispose()
    if not keep:
        place.drop(name)
    for n, result in enumerate(results):
        result["slices"] = slices.get(f"p{n}", 0)
    return {"wall": wall, "database_cpu": database, "planners": results}


def show(processes: int, run: dict[str, object]) -> None:
    planners = run["planners"]
    assert isinstance(planners, list)
    each = "; ".join(
        f"p{n}: {p['cpu']:.1f} CPU s, {p['slices']} slices, {p['digests']:,} digests, {p['peak_kb'] / 1024:.0f} MB"
        for n, p in enumerate(planners)
    )
    print(f"{processes} process(es): {run['wall']:.2f} s; PostgreSQL {run['database_cpu']:.1f} CPU s; {each}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True, help="a PostgreSQL database to make the stores beside")
    parser.add_argument("--subscribers", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--no-history", action="store_true", help="a store of day one instead")
    args = parser.parse_args()
    filters = list(zipf_choices(filter_expressions(), args.subscribers))
    with tempfile.TemporaryDirectory(prefix="digestbot-share-") as tmp:
        folder = Path(tmp)
        settings = Settings.model_validate({"paths": {"var_dir": str(folder / "var")}})
        place = Place(folder, args.database_url)
        try:
            steady_store(place, filters, 0 if args.no_history else args.days, args.entries, settings)
            one = shared_pass(place, 1, folder)
            show(1, one)
            several = shared_pass(place, args.processes, folder)
            show(args.processes, several)
            digests = [sum(p["digests"] for p in run["planners"]) for run in (one, several)]  # type: ignore[attr-defined]
            assert digests[0] == digests[1], digests
            history = "day one" if args.no_history else f"{args.days} days at the steady state"
            print(
                f"{args.subscribers:,} subscribers, {history}: {digests[0]:,} digests; "
                f"speed-up with {args.processes} processes: {one['wall'] / several['wall']:.2f}  "  # type: ignore[operator]
                f"target >= 1.5 (PostgreSQL; {os.cpu_count()} cores)"
            )
        finally:
            place.close()


if __name__ == "__main__":
    main()
