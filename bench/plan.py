"""Planning benchmark: does planning a day's digests grow with the ledger's history?

Usage: python bench/plan.py [--subscribers 100000] [--entries 300] [--days 30] [--repeat 3]

Two stores with the same --subscribers subscribers (filters drawn as in
bench/send.py, all subscribed --days + 1 days ago) and the same --entries new
entries today.  One has no history; the other has --days earlier days of
--entries entries each, every one of which was sent to every subscriber whose
filter matched it (sent scheduled digests and their ledger rows, written in
bulk).  Prints the time of the real planner for today in both, and the ratio
(target <= 1.3).  Each time is the median of --repeat passes, each on a fresh
copy of its store (one pass takes about a second at 2,000 subscribers, less
than this machine's noise between runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import closing
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.send import DAY, RULES, add_subscribers, zipf_choices  # noqa: E402
from bot.choose.select import SelectionCache  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.ingest.service import ingest_bytes  # noqa: E402
from bot.plan import plan, planned_key  # noqa: E402
from bot.store.bulk import allocate_ids, bulk_insert
from bot.store.engine import make_engine, sessions, transaction, upgrade  # noqa: E402
from bot.store.entry_reads import entries_first_seen_between  # noqa: E402
from bot.store.schema import Digest, LedgerEntry  # noqa: E402
from bot.store.subscribers import list_subscribers, set_watermarks  # noqa: E402
from tests.helpers import dump_text, filter_expressions  # noqa: E402


def store(folder: Path, name: str, filters: list[str], days: int):
    engine = make_engine(f"sqlite:///{folder / name}")
    upgrade(engine)
    factory = sessions(engine)
    add_subscribers(factory, filters, created=DAY - timedelta(days=days + 1))
    return engine, factory


def write_history(factory, filters: list[str], days: int, entries: int) -> int:
    """*days* past days, each ingested and sent in full; returns the ledger rows written."""
    by_filter: dict[str, list[int]] = defaultdict(list)  # filter -> subscriber ids
    for subscriber_id, text in enumerate(filters, start=1):
        by_filter[text].append(subscriber_id)
    with factory() as session:
        keys = {s.filter: planned_key(s, RULES) for s in list_subscribers(session)}
    rows = 0
    for back in range(days, 0, -1):
        day = DAY - timedelta(days=back)
        ingest_bytes(
            factory,
            dump_text(entries, seed=100 + back, start=back * 1_000_000).encode(),
            name=f"day-{back}",
            now=day - timedelta(hours=2),
            rules=RULES,
        )
        cache = SelectionCache()
        with factory() as session:
            todays = entries_first_seen_between(session, day - timedelta(hours=3), day)
        matched = {f: [e for e in todays if cache.verdict(f, e, RULES) is not None] for f in by_filter}
        with transaction(factory) as session:
            digests, ledger = [], []
            ids = iter(allocate_ids(session, Digest.__table__, len(filters)))
            for text, subscriber_ids in by_filter.items():
                for subscriber_id in subscriber_ids:
                    digest_id = next(ids)
                    digests.append(
                        {
                            "id": digest_id,
                            "subscriber_id": subscriber_id,
                            "local_date": day.date(),
                            "kind": "scheduled",
                            "resend_of_id": None,
                            "state": "sent" if matched[text] else "empty",
                            "attempts": 1,
                            "next_attempt_at": day,
                            "lease_owner": None,
                            "lease_expires_at": None,
                            "message_id": f"<h.{digest_id}@bench>",
                            "entry_count": len(matched[text]),
                            "pending_count": 0,
                            "smtp_code": 250,
                            "last_error": None,
                            "planned_at": day,
                            "sent_at": day,
                        }
                    )
                    ledger += [
                        {
                            "subscriber_id": subscriber_id,
                            "entry_id": e.id,
                            "digest_id": digest_id,
                            "position": n,
                            "summary_source_id": e.summary_source_id,
                            "why": "history",
                            "tags": [],
                            "url": "https://x",
                        }
                        for n, e in enumerate(matched[text])
                    ]
            bulk_insert(session, Digest.__table__, digests)
            for start in range(0, len(ledger), 50_000):
                bulk_insert(session, LedgerEntry.__table__, ledger[start : start + 50_000])
            # The watermark the real planner leaves after a day with nothing pending.
            set_watermarks(
                session,
                [
                    (subscriber_id, day, keys[text])
                    for text, subscriber_ids in by_filter.items()
                    for subscriber_id in subscriber_ids
                ],
            )
            rows += len(ledger)
        print(f"    history: day -{back}: {len(ledger):,} ledger rows", file=sys.stderr)
    return rows


def timed_plans(engine, factory, settings: Settings, entries: int, repeat: int) -> tuple[float, int]:
    """Today's dump ingested, then the median time of *repeat* planning passes, each on
    a copy of the store as it is now; and the digests one pass queues."""
    ingest_bytes(factory, dump_text(entries, seed=3).encode(), name="today", now=DAY - timedelta(hours=2), rules=RULES)
    engine.dispose()
    original = Path(engine.url.database)
    with closing(sqlite3.connect(original)) as connection:  # the whole store in the one file copied
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    times, counts = [], set()
    for n in range(repeat):
        copy = original.with_name(f"{original.stem}-pass{n}.sqlite3")
        shutil.copyfile(original, copy)
        os.sync()  # the copy's writeback is not left to compete with the pass
        pass_engine = make_engine(f"sqlite:///{copy}")
        started = time.perf_counter()
        report = plan(sessions(pass_engine), settings, RULES, now=DAY, all_due=True)
        times.append(time.perf_counter() - started)
        counts.add(len(report.planned))
        pass_engine.dispose()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
    assert len(counts) == 1, counts
    print(f"    passes: {', '.join(f'{t:.2f} s' for t in times)}", file=sys.stderr)
    return statistics.median(times), counts.pop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3, help="planning passes per store (the median is printed)")
    args = parser.parse_args()
    filters = list(zipf_choices(filter_expressions(), args.subscribers))
    with tempfile.TemporaryDirectory(prefix="digestbot-plan-") as tmp:
        folder = Path(tmp)
        settings = Settings.model_validate({"paths": {"var_dir": str(folder / "var")}})
        fresh_engine, fresh = store(folder, "fresh.sqlite3", filters, args.days)
        fresh_s, fresh_n = timed_plans(fresh_engine, fresh, settings, args.entries, args.repeat)
        print(f"{args.subscribers:,} subscribers, no history:      plan {fresh_s:7.2f} s ({fresh_n:,} digests)")
        old_engine, old = store(folder, "history.sqlite3", filters, args.days)
        rows = write_history(old, filters, args.days, args.entries)
        old_s, old_n = timed_plans(old_engine, old, settings, args.entries, args.repeat)
        print(
            f"{args.subscribers:,} subscribers, {args.days} days of history: plan {old_s:7.2f} s ({old_n:,} digests; "
            f"{rows:,} ledger rows)"
        )
        print(f"ratio history/none: {old_s / fresh_s:.2f}  target <= 1.3")


if __name__ == "__main__":
    main()
