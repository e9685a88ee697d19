"""Year benchmark: does the store stay small and planning flat over a year of operation?

Usage: python bench/years.py [--subscribers 2000] [--entries 300] [--days 365] [--keep-days 90]
                             [--database-url URL]

One store (a SQLite file in a temporary folder, or an empty PostgreSQL database or
schema given by --database-url) with --subscribers subscribers (filters drawn as in
bench/send.py).  Each simulated day: a dump of --entries new papers is ingested, the
real planner plans the day, every queued digest is marked sent (what delivery
records), and retention (``database.keep_days`` = --keep-days) runs as the
scheduler's leader runs it.  Prints, at days 30, 90, 180 and the last: the store's
size, split into what grows with subscribers x days (digests, digest bodies, revision notices)
and the catalogue (entries, appearances, tags, sources), and the per-subscriber part
in bytes a subscriber-day kept; then the planning time of the first days and the
last days (median of five each) and their ratio (target <= 1.2), and how long
retention took a day.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, text, update  # noqa: E402

from bench.send import DAY, RULES, add_subscribers, zipf_choices  # noqa: E402
from bot.choose.select import SelectionCache  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.ingest.storing import ingest_bytes  # noqa: E402
from bot.plan import plan  # noqa: E402
from bot.plan.retention import remove_expired  # noqa: E402
from bot.store.engine import is_sqlite, make_engine, sessions, transaction, upgrade  # noqa: E402
from bot.store.schema import Digest  # noqa: E402
from tests.helpers import dump_text, filter_expressions  # noqa: E402

PER_SUBSCRIBER = ("digests", "body_items", "revision_notices")
REPORT_DAYS = (30, 90, 180, 365)


def table_bytes(engine: Engine) -> dict[str, int]:
    """Bytes per table, its indexes included."""
    with engine.connect() as connection:
        if is_sqlite(engine):
            rows = connection.execute(
                text(
                    "SELECT coalesce(m.tbl_name, s.name), sum(s.pgsize) FROM dbstat s "
                    "LEFT JOIN sqlite_master m ON m.name = s.name GROUP BY 1"
                )
            )
        else:
            rows = connection.execute(
                text(
                    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.relkind = 'r' AND n.nspname = current_schema()"
                )
            )
        return {name: int(size) for name, size in rows}


def store_size(engine: Engine) -> int:
    """What the store takes on disk: the SQLite file (free pages included), or the schema's relations."""
    if is_sqlite(engine):
        path = Path(engine.url.database or "")
        return path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + "-wal"))
    return sum(table_bytes(engine).values())


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", type=int, default=2000)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--keep-days", type=int, default=90)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    with TemporaryDirectory() as folder:
        url = args.database_url or f"sqlite:///{Path(folder) / 'year.sqlite3'}"
        engine = make_engine(url)
        upgrade(engine)
        factory = sessions(engine)
        settings = Settings.model_validate(
            {"paths": {"var_dir": folder}, "database": {"url": url, "keep_days": args.keep_days}}
        )
        filters = list(zipf_choices(filter_expressions(), args.subscribers))
        add_subscribers(factory, filters, created=DAY - timedelta(days=1))
        selection = SelectionCache()  # kept from day to day, as the daemon keeps it
        planning: list[float] = []
        pruning: list[float] = []
        print(f"{args.subscribers:,} subscribers, {args.entries} entries a day, keep_days {args.keep_days}, {url}")
        for day in range(1, args.days + 1):
            now = DAY + timedelta(days=day - 1)
            text_of_day = dump_text(args.entries, seed=day, start=day * 1_000_000)
            ingest_bytes(factory, text_of_day.encode(), name=f"day-{day}", now=now - timedelta(hours=2), rules=RULES)
            started = time.perf_counter()
            report = plan(factory, settings, RULES, now=now, all_due=True, cache=selection)
            planning.append(time.perf_counter() - started)
            with transaction(factory) as session:
                session.execute(update(Digest).where(Digest.state == "queued").values(state="sent", sent_at=now))
            started = time.perf_counter()
            remove_expired(factory, settings, now=now)
            pruning.append(time.perf_counter() - started)
            if day in REPORT_DAYS or day == args.days:
                sizes = table_bytes(engine)
                per = sum(sizes.get(t, 0) for t in PER_SUBSCRIBER)
                kept_days = min(day, args.keep_days)
                split = ", ".join(
                    f"{t} {sizes.get(t, 0) / (args.subscribers * kept_days):,.0f}" for t in PER_SUBSCRIBER
                )
                print(
                    f"day {day:>3}: store {mib(store_size(engine))}; per subscriber x day tables {mib(per)} "
                    f"({per / (args.subscribers * kept_days):,.0f} B a subscriber-day kept: {split}), "
                    f"catalogue {mib(sum(sizes.values()) - per)}; "
                    f"planned {len(report.planned):,} in {planning[-1]:.2f} s",
                    flush=True,
                )
            else:
                print(
                    f"  day {day}: planning {planning[-1]:.2f} s, retention {pruning[-1]:.2f} s",
                    file=sys.stderr,
                    flush=True,
                )
        full = min(settings.digest.max_age_days, len(planning))  # left-over windows are as long as they get
        first, month, last = (
            statistics.median(p) for p in (planning[:5], planning[max(0, full - 5) : full], planning[-5:])
        )
        print(
            f"planning, median of five days: days 1-5 {first:.3f} s, days {full - 4}-{full} {month:.3f} s, "
            f"the last five {last:.3f} s; last / days 1-5 {last / first:.2f}, last / days {full - 4}-{full} "
            f"{last / month:.2f}"
        )
        sizes = table_bytes(engine)
        per_day = sum(sizes.get(t, 0) for t in PER_SUBSCRIBER) / (args.subscribers * min(args.days, args.keep_days))
        print(f"at the end: {per_day:,.0f} B a subscriber-day kept")
        after = pruning[args.keep_days :] or pruning
        print(f"retention a day once digests expire: median {statistics.median(after):.3f} s, max {max(after):.3f} s")
        engine.dispose()


if __name__ == "__main__":
    main()
