"""A big list's day on PostgreSQL: plan, then build and send, with each process's peak RSS.

Usage: python bench/day.py --database-url postgresql+psycopg://... [--subscribers 1000000]
                           [--entries 300] [--days 0] [--workers 2] [--no-send]

Builds one store of --subscribers readers (200 filters, Zipf-like, as bench/send.py),
with --days days at the steady state as `bench/plan.py --left-overs` writes them (0:
day one) and today's dump, vacuumed and analyzed.  Then:

  * plan: the pass `bench/share.py` times, by one process and by two, each on a fresh
    copy of the store: wall time, digests a second, each process's CPU seconds and peak
    RSS, PostgreSQL's CPU seconds;
  * send: on the copy the two planned, --workers `digestbot worker` processes (their
    default settings but smtp.pool_size 4) build and send every queued digest into
    Postfix's smtp-sink on 127.0.0.1, timed from their start to the last digest
    recorded as sent: digests a second, each worker's CPU seconds and peak RSS (VmHWM,
    read from /proc just before it is told to stop), PostgreSQL's and smtp-sink's CPU
    seconds.  --no-send skips it and says so.

Needs smtp-sink (Debian: apt-get install postfix) unless --no-send; installs nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select  # noqa: E402

from bench.places import Place  # noqa: E402
from bench.send import zipf_choices  # noqa: E402
from bench.share import postgres_cpu_seconds, shared_pass, show, steady_store  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.store.engine import make_engine, sessions  # noqa: E402
from bot.store.schema import Digest  # noqa: E402
from bot.tools.sink import free_port  # noqa: E402
from tests.helpers import filter_expressions  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DIGESTBOT = str(Path(sys.executable).parent / "digestbot")


def process_status(pid: int) -> tuple[float, float]:
    """CPU seconds (user and system) and peak RSS (MB) of process *pid*."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    return cpu, peak / 1024


def send_day(url: str, workers: int, folder: Path) -> dict[str, object]:
    """Every queued digest of the store at *url* built and sent by *workers* workers."""
    engine = make_engine(url)
    factory = sessions(engine)
    with factory() as session:
        queued = session.scalar(select(func.count()).select_from(Digest).where(Digest.state == "queued")) or 0
        # Today's digests come after every digest of the history: count only those sent.
        first = session.scalar(select(func.min(Digest.id)).where(Digest.state == "queued")) or 0
    port = free_port()
    sink = subprocess.Popen(
        ["smtp-sink", "-u", "nobody", f"127.0.0.1:{port}", "1000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env.update(
        DIGESTBOT_DATABASE__URL=url,
        DIGESTBOT_SMTP__PORT=str(port),
        DIGESTBOT_SMTP__POOL_SIZE="4",
        DIGESTBOT_PATHS__TEMPLATES_DIR=str(ROOT / "templates"),
        DIGESTBOT_PATHS__VAR_DIR=str(folder / "var"),
        DIGESTBOT_WEB__SIGNING_KEY="bench-signing-key-0123456789",
        DIGESTBOT_WEB__PUBLIC_URL="https://digest.bench.example",
    )
    time.sleep(0.5)
    database_before = postgres_cpu_seconds()
    started = time.perf_counter()
    procs = [
        subprocess.Popen([DIGESTBOT, "worker"], env=env, cwd=folder, stderr=subprocess.DEVNULL) for _ in range(workers)
    ]
    try:
        while True:
            with factory() as session:
                today = select(func.count()).select_from(Digest).where(Digest.id >= first, Digest.state == "sent")
                sent = session.scalar(today) or 0
            if sent >= queued or any(p.poll() is not None for p in procs):
                break
            time.sleep(1)
        seconds = time.perf_counter() - started
        each = [process_status(p.pid) for p in procs]
        database = postgres_cpu_seconds() - database_before
        sink_cpu = process_status(sink.pid)[0]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=120)
        sink.terminate()
        sink.wait(timeout=30)
        engine.dispose()
    assert sent >= queued, f"the workers stopped with {sent:,} of {queued:,} sent"
    return {"seconds": seconds, "sent": sent, "workers": each, "database_cpu": database, "sink_cpu": sink_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True, help="a PostgreSQL database to make the stores beside")
    parser.add_argument("--subscribers", type=int, default=1_000_000)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--days", type=int, default=0, help="days at the steady state (0: day one)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-send", action="store_true", help="plan only")
    args = parser.parse_args()
    if not args.no_send and not shutil.which("smtp-sink"):
        sys.exit("bench/day.py needs smtp-sink on PATH (Debian: apt-get install postfix), or --no-send")
    filters = list(zipf_choices(filter_expressions(), args.subscribers))
    with tempfile.TemporaryDirectory(prefix="digestbot-day-") as tmp:
        folder = Path(tmp)
        settings = Settings.model_validate({"paths": {"var_dir": str(folder / "var")}})
        place = Place(folder, args.database_url)
        try:
            built = time.perf_counter()
            steady_store(place, filters, args.days, args.entries, settings)
            history = f"{args.days} days at the steady state" if args.days else "day one"
            print(f"{args.subscribers:,} subscribers, {history}: store built in {time.perf_counter() - built:.0f} s")
            for processes in (1, 2):
                run = shared_pass(place, processes, folder, keep=processes == 2)
                show(processes, run)
                digests = sum(p["digests"] for p in run["planners"])  # type: ignore[attr-defined]
                print(f"    plan: {digests / run['wall']:,.0f} digests/s")  # type: ignore[operator]
            if args.no_send:
                print("send: not run (--no-send)")
                return
            day = send_day(place.url("pass2"), args.workers, folder)
            shares = cast(list[tuple[float, float]], day["workers"])
            workers = "; ".join(f"w{n}: {cpu:.0f} CPU s, {mb:.0f} MB" for n, (cpu, mb) in enumerate(shares))
            print(
                f"build and send: {day['seconds']:.1f} s for {day['sent']:,} digests "
                f"({day['sent'] / day['seconds']:,.0f} digests/s; smtp-sink on 127.0.0.1); "  # type: ignore[operator]
                f"{workers}; PostgreSQL {day['database_cpu']:.0f} CPU s, smtp-sink {day['sink_cpu']:.0f} CPU s"
            )
        finally:
            place.close()


if __name__ == "__main__":
    main()
