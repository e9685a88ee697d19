"""Planning benchmark: does planning a day's digests grow with the history of what was sent?

Usage: python bench/plan.py [--subscribers 100000] [--entries 300] [--days 30] [--repeat 3]
                            [--left-overs] [--warm] [--database-url URL] [--models PERCENT]
                            [--ranker PERCENT]

Two stores with the same --subscribers subscribers (filters drawn as in
bench/send.py, all subscribed --days + 1 days ago) and the same --entries new
entries today.  One has no history; the other has --days earlier days of
--entries entries each, every one of which was sent to every subscriber whose
filter matched it (sent scheduled digests and their bodies, written in bulk).
Prints the time of the real planner for today in both, and the ratio (target
<= 1.3).  Each time is the median of --repeat passes, each on a fresh copy of its
store (one pass takes about a second at 2,000 subscribers, less than this
machine's noise between runs).

--left-overs builds the history at the steady state instead: each past day, each filter's
subscribers were sent the best `digest.max_entries` of what matched since they were
last sent everything (as `bot.choose.select` ranks and picks them), and the rest was
left for later, for at most `digest.max_age_days`; the watermarks are what the planner
leaves after such a day, and each filter's standing ranking as that day's pass left it
(``bot.plan.standings``).  Prints the ratio steady/none (target <= 1.5) and the planning
time a subscriber (target <= 0.3 ms).

Each timed pass is a new process's first (cold) unless --warm: then it keeps the caches
of a pass three hours earlier on another copy of the store, as the daemon keeps its
own.  --database-url postgresql+psycopg://... makes the stores as databases beside that
one (dropped at the end), vacuums and analyzes them as autovacuum would have over the
days they stand for, and copies them as templates; the default is SQLite files.

--models PERCENT instead builds the store with history once, gives PERCENT of the
subscribers a library of five stored papers, and prints: the time to train their
models (per subscriber) and a model's size; and, each in a fresh process as
`digestbot scheduler` would plan, the planning time and peak RSS (VmHWM) of one pass
without and with the models (target: time <= 1.5 x, peak RSS <= 200 MB).

--ranker PERCENT builds the store with history once, gives PERCENT of the subscribers a
library (the readers an outside ranker is asked about), trains their models (as the
daemon has before any pass but the first after a library changes), and prints the
planning time of --repeat pairs of passes, each pass in a fresh process, without a
ranker and with the example ranker (examples/rankers/bm25/, a process on localhost)
named in ``ranker.url``, and the median ratio (target: 1.5 x).

--embeddings PERCENT is --ranker with the readers' models on embeddings as the challenger
(``llm.embedding_model``): every paper embedded as a random unit vector of 256
dimensions, stored as the embedding pass stores it, and the readers' models trained on
them before the passes as the daemon's language-model job trains them (printed: the
time a reader, target <= 20 ms); the same pairs of passes, without and with it (target:
1.5 x).  --models, --ranker and --embeddings build SQLite stores only.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from contextlib import closing
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import select, update  # noqa: E402

from bench.places import Place  # noqa: E402
from bench.send import DAY, RULES, add_subscribers, zipf_choices  # noqa: E402
from bot.choose.candidates import Candidate, pick, rank
from bot.choose.select import SelectionCache  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.ingest.storing import ingest_bytes  # noqa: E402
from bot.plan import plan, planned_key  # noqa: E402
from bot.plan.standings import Standings  # noqa: E402
from bot.plan.windows import watermark  # noqa: E402
from bot.store.bulk import allocate_ids, among, bulk_insert, chunks
from bot.store.engine import make_engine, sessions, transaction, upgrade  # noqa: E402
from bot.store.entry_reads import entries_first_seen_between  # noqa: E402
from bot.store.schema import BodyItem, Digest  # noqa: E402
from bot.store.schema import SubscriberRow as SubscriberRow  # noqa: E402
from bot.store.subscribers import list_subscribers  # noqa: E402
from bot.unsubscribes import close_journal  # noqa: E402
from tests.helpers import dump_text, filter_expressions  # noqa: E402


def store(place: Place, name: str, filters: list[str], days: int):
    engine = make_engine(place.create(name))
    upgrade(engine)
    factory = sessions(engine)
    add_subscribers(factory, filters, created=DAY - timedelta(days=days + 1))
    return engine, factory


def sent_of_day(
    text: str, todays: list, cache: SelectionCache, carried: dict[str, list[Candidate]], day, settings: Settings | None
) -> tuple[list, int, object]:
    """What a filter's subscribers were sent on *day*: all it matched (no *settings*), or
    the best ``digest.max_entries`` of today's matches and what was left before, with how
    many are left and the watermark the planner leaves."""
    found = [Candidate(e, x) for e in todays if (x := cache.verdict(text, e, RULES)) is not None]
    if settings is None:
        return [c.entry for c in found], 0, day
    oldest = day - timedelta(days=settings.digest.max_age_days)
    waiting = [c for c in carried.get(text, []) if c.entry.first_seen_at >= oldest] + found
    picked = pick(rank(sorted(waiting, key=lambda c: c.entry.id)), frozenset(), settings.digest.max_entries)
    taken = {c.entry.id for c in picked.chosen}
    carried[text] = [c for c in waiting if c.entry.id not in taken]
    return [c.entry for c in picked.chosen], picked.left, watermark(picked.oldest_left, day, oldest)


def write_history(factory, filters: list[str], days: int, entries: int, settings: Settings | None = None) -> int:
    """*days* past days, each ingested and sent: in full, or with *settings* at the steady
    state (``sent_of_day``); returns how many (entry, subscriber) pairs the digests
    written carried (the claims the planner reads)."""
    by_filter: dict[str, list[int]] = defaultdict(list)  # filter -> subscriber ids
    for subscriber_id, text in enumerate(filters, start=1):
        by_filter[text].append(subscriber_id)
    with factory() as session:
        keys = {s.filter: planned_key(s, RULES) for s in list_subscribers(session)}
    rows = 0
    kept = settings or Settings()
    carried: dict[str, list[Candidate]] = {}
    cache = SelectionCache()
    for back in range(days, 0, -1):
        day = DAY - timedelta(days=back)
        ingest_bytes(
            factory,
            dump_text(entries, seed=100 + back, start=back * 1_000_000).encode(),
            name=f"day-{back}",
            now=day - timedelta(hours=2),
            rules=RULES,
        )
        with factory() as session:
            todays = entries_first_seen_between(session, day - timedelta(hours=3), day)
            # What the day's real planning pass left in the store besides digests: each
            # filter's standing ranking, brought up to the day (``bot.plan.standings``).
            standings = Standings(cache, RULES, day, kept.digest.max_age_days, kept.digest.max_entries)
            standings.prepare(session, list(by_filter))
        standings.save(factory)
        sent = {f: sent_of_day(f, todays, cache, carried, day, settings) for f in by_filter}
        matched = {f: chosen for f, (chosen, _, _) in sent.items()}
        with transaction(factory) as session:
            digests, items, claims = [], [], 0
            ids = iter(allocate_ids(session, Digest.__table__, len(filters)))
            for number, (text, subscriber_ids) in enumerate(by_filter.items()):
                key = f"history-{back}-{number}" if matched[text] else None
                items += [
                    {
                        "body_key": key,
                        "position": n,
                        "entry_id": e.id,
                        "summary_source_id": e.summary_source_id,
                        "why": "history",
                        "tags": [],
                        "url": "https://x",
                        "taste": None,
                    }
                    for n, e in enumerate(matched[text])
                ]
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
                            "pending_count": sent[text][1],
                            "smtp_code": 250,
                            "last_error": None,
                            "planned_at": day,
                            "sent_at": day,
                            "body_key": key,
                        }
                    )
                    claims += len(matched[text])
            bulk_insert(session, Digest.__table__, digests)
            bulk_insert(session, BodyItem.__table__, items)
            # The watermark the real planner leaves after a day with nothing pending: the
            # same for a filter's readers, so one statement a filter (a million rows a day
            # through executemany took most of a day's writing).
            for text, subscriber_ids in by_filter.items():
                for part in chunks(subscriber_ids):
                    session.execute(
                        update(SubscriberRow)
                        .where(among(session, SubscriberRow.id, part))
                        .values(planned_through=sent[text][2], planned_key=keys[text])
                    )
            rows += claims
        print(f"    history: day -{back}: {claims:,} entries carried", file=sys.stderr)
    return rows


def timed_plans(
    place: Place, name: str, engine, factory, settings: Settings, entries: int, repeat: int, warm: bool = False
) -> tuple[float, int]:
    """Today's dump ingested, then the median time of *repeat* planning passes, each on
    a copy of the store as it is now; and the digests one pass queues.  *warm*: each
    timed pass keeps the caches of a pass three hours earlier (on another copy), as the
    daemon keeps its own from pass to pass; else each is a new process's first."""
    ingest_bytes(factory, dump_text(entries, seed=3).encode(), name="today", now=DAY - timedelta(hours=2), rules=RULES)
    engine.dispose()
    place.settle(name)
    times, counts = [], set()
    for n in range(repeat):
        cache = SelectionCache()
        if warm:
            earlier_url = place.copy(name, f"{name}_warm")
            earlier = make_engine(earlier_url)
            plan(sessions(earlier), settings, RULES, now=DAY - timedelta(hours=3), all_due=True, cache=cache)
            close_journal(earlier_url)
            earlier.dispose()
            place.drop(f"{name}_warm")
        pass_url = place.copy(name, f"{name}_pass{n}")
        pass_engine = make_engine(pass_url)
        gc.collect()  # what building the stores left is not collected during a timed pass
        started = time.perf_counter()
        report = plan(sessions(pass_engine), settings, RULES, now=DAY, all_due=True, cache=cache)
        times.append(time.perf_counter() - started)
        counts.add(len(report.planned))
        close_journal(pass_url)
        pass_engine.dispose()
        place.drop(f"{name}_pass{n}")
    assert len(counts) == 1, counts
    print(f"    passes: {', '.join(f'{t:.2f} s' for t in times)}", file=sys.stderr)
    return statistics.median(times), counts.pop()


PASS_IN_PROCESS = """
import json, resource, sys, time
from bench.send import DAY, RULES
from bot.config import Settings
from bot.plan import plan
from bot.store.engine import make_engine, sessions
extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
settings = Settings.model_validate({"paths": {"var_dir": sys.argv[2]}, **extra})
factory = sessions(make_engine("sqlite:///" + sys.argv[1]))
started = time.perf_counter()
report = plan(factory, settings, RULES, now=DAY, all_due=True)
seconds = time.perf_counter() - started
peak = max(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({"seconds": seconds, "digests": len(report.planned), "peak_kb": peak}))
"""


def pass_in_process(
    original: Path, folder: Path, repeat: int, settings: Mapping[str, object] | None = None
) -> tuple[float, int, int]:
    """Median seconds, digests and the highest peak RSS (KB) of *repeat* passes, each in a
    fresh process on a fresh copy of *original*; *settings*: sections besides the defaults."""
    import json
    import subprocess

    results = []
    for n in range(repeat):
        copy = original.with_name(f"{original.stem}-proc{n}.sqlite3")
        shutil.copyfile(original, copy)
        os.sync()
        done = subprocess.run(
            [sys.executable, "-c", PASS_IN_PROCESS, str(copy), str(folder / "var"), json.dumps(settings or {})],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
    return (
        statistics.median(r["seconds"] for r in results),
        results[0]["digests"],
        max(r["peak_kb"] for r in results),
    )


def give_libraries(factory, percent: float, papers: int = 5) -> int:
    """Libraries of *papers* stored entries for *percent* of the subscribers; how many."""
    import random

    from bot.store.schema import Entry, SubscriberRow
    from bot.store.taste_tables import LibraryPaperRow

    with factory() as session:
        subscriber_ids = list(session.scalars(select(SubscriberRow.id)))
        entries = list(session.execute(select(Entry.id, Entry.key, Entry.title)))
    rng = random.Random(7)
    chosen = rng.sample(subscriber_ids, int(len(subscriber_ids) * percent / 100))
    rows = [
        {
            "subscriber_id": sid,
            "key": key,
            "entry_id": eid,
            "title": title,
            "abstract": "",
            "source": "ids",
            "added_at": DAY,
        }
        for sid in chosen
        for eid, key, title in rng.sample(entries, papers)
    ]
    with transaction(factory) as session:
        for start in range(0, len(rows), 50_000):
            bulk_insert(session, LibraryPaperRow.__table__, rows[start : start + 50_000])
    return len(chosen)


def models_mode(args: argparse.Namespace, filters: list[str], folder: Path, settings: Settings) -> None:
    from bot.store.taste_tables import TasteModel
    from bot.taste.training import refresh_models

    engine, factory = store(Place(folder), "models", filters, args.days)
    write_history(factory, filters, args.days, args.entries)
    ingest_bytes(
        factory, dump_text(args.entries, seed=3).encode(), name="today", now=DAY - timedelta(hours=2), rules=RULES
    )
    original = Path(engine.url.database)
    engine.dispose()
    without = folder / "without.sqlite3"
    with closing(sqlite3.connect(original)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copyfile(original, without)
    readers = give_libraries(factory, args.models)
    started = time.perf_counter()
    report = refresh_models(factory, DAY)
    trained = time.perf_counter() - started
    with factory() as session:
        sizes = [
            len(i) + len(w) + len(str(lib))
            for i, w, lib in session.execute(select(TasteModel.indices, TasteModel.weights, TasteModel.library))
        ]
    engine.dispose()
    with closing(sqlite3.connect(original)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(
        f"{readers:,} readers with a library: trained {report.trained:,} models in {trained:.1f} s "
        f"({1000 * trained / max(1, report.trained):.0f} ms each, the vocabulary fit included); "
        f"a model is {statistics.mean(sizes) / 1024:.1f} KB on average"
    )
    base_s, base_n, base_kb = pass_in_process(without, folder, args.repeat)
    with_s, with_n, with_kb = pass_in_process(original, folder, args.repeat)
    for label, (seconds, digests, kb) in (
        ("no models", (base_s, base_n, base_kb)),
        (f"{args.models:g} % models", (with_s, with_n, with_kb)),
    ):
        print(
            f"{args.subscribers:,} subscribers, {label}: plan {seconds:7.2f} s ({digests:,} digests), "
            f"peak RSS {kb / 1024:.0f} MB"
        )
    print(f"ratio models/none: {with_s / base_s:.2f}  target <= 1.5; peak RSS target <= 200 MB")


def _store_with_libraries(args: argparse.Namespace, filters: list[str], folder: Path, percent: float):
    """One SQLite store with history and today's entries, libraries for *percent* of the
    subscribers and their models trained (as the daemon has them before any pass but the
    first after a library changes, so no timed pass is mostly training): its file, the
    readers with a library, the models trained."""
    from bot.taste.training import refresh_models

    engine, factory = store(Place(folder), "ranker", filters, args.days)
    write_history(factory, filters, args.days, args.entries)
    ingest_bytes(
        factory, dump_text(args.entries, seed=3).encode(), name="today", now=DAY - timedelta(hours=2), rules=RULES
    )
    readers = give_libraries(factory, percent)
    trained = refresh_models(factory, DAY).trained
    return Path(engine.url.database), engine, factory, readers, trained


def _checkpointed(engine, original: Path) -> None:
    engine.dispose()
    with closing(sqlite3.connect(original)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _pairs(args: argparse.Namespace, original: Path, folder: Path, base: dict, challenged: dict, name: str) -> None:
    """--repeat pairs of passes, each in a fresh process: without a challenger, with it."""
    ratios = []
    for n in range(args.repeat):  # alternating, so a slow minute of the machine's weighs on both
        base_s, base_n, _ = pass_in_process(original, folder, 1, base)
        with_s, with_n, _ = pass_in_process(original, folder, 1, challenged)
        ratios.append(with_s / base_s)
        print(
            f"pass {n + 1}: without {name} {base_s:6.2f} s ({base_n:,} digests); "
            f"with it {with_s:6.2f} s ({with_n:,} digests); ratio {ratios[-1]:.2f}"
        )
    print(f"ratio {name}/none, median of {len(ratios)}: {statistics.median(ratios):.2f}  target <= 1.5")


def ranker_mode(args: argparse.Namespace, filters: list[str], folder: Path) -> None:
    """--ranker PERCENT: one store with history and libraries for PERCENT of the
    subscribers, their models trained; pairs of passes without a ranker and with the example
    ranker on localhost."""
    import subprocess

    original, engine, _, readers, trained = _store_with_libraries(args, filters, folder, args.ranker)
    _checkpointed(engine, original)
    example = Path(__file__).resolve().parent.parent / "examples" / "rankers" / "bm25" / "ranker.py"
    ranker = subprocess.Popen([sys.executable, str(example), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert ranker.stdout is not None
        url = ranker.stdout.readline().split()[-1]
        key = {"web": {"signing_key": "k" * 32}}
        print(
            f"{args.subscribers:,} subscribers, {readers:,} with a library (asked about; {trained:,} models trained "
            "before the passes), example ranker on localhost"
        )
        _pairs(args, original, folder, key, {**key, "ranker": {"url": url}}, "a ranker")
    finally:
        ranker.terminate()
        ranker.wait(10)


def embeddings_mode(args: argparse.Namespace, filters: list[str], folder: Path) -> None:
    """--embeddings PERCENT: as --ranker, with every entry and library paper embedded (random
    unit vectors of 256 dimensions, as stored) and the readers' embeddings models as the
    challenger (``llm.embedding_model``) instead of a ranker over HTTP."""
    import random

    from bot.domain.llm import packed
    from bot.store.embeddings import save_embeddings
    from bot.store.schema import Entry
    from bot.taste.embedded_models import refresh_embedding_models

    original, engine, factory, readers, trained = _store_with_libraries(args, filters, folder, args.embeddings)
    rng = random.Random(11)
    with transaction(factory) as session:
        keys = list(session.scalars(select(Entry.key)))
        vectors = [(key, packed([rng.gauss(0, 1) for _ in range(256)]) or b"") for key in keys]
        save_embeddings(session, vectors, "bench-256", DAY - timedelta(hours=1))
    models = refresh_embedding_models(factory, "bench-256", DAY - timedelta(minutes=30))
    _checkpointed(engine, original)
    key = {"web": {"signing_key": "k" * 32}}
    print(
        f"{args.subscribers:,} subscribers, {readers:,} with a library ({trained:,} TF-IDF models trained before "
        f"the passes), {len(keys):,} papers embedded ({len(vectors[0][1]):,} bytes each)"
    )
    print(
        f"their models on the embeddings: {models.trained:,} trained in {models.seconds:.1f} s, "
        f"{1000 * models.seconds / max(1, models.trained):.1f} ms a reader, slowest {1000 * models.slowest:.1f} ms "
        "(target <= 20 ms)"
    )
    _pairs(args, original, folder, key, {**key, "llm": {"embedding_model": "bench-256"}}, "embeddings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3, help="planning passes per store (the median is printed)")
    parser.add_argument("--models", type=float, default=0, help="percent of subscribers with a model (see above)")
    parser.add_argument(
        "--ranker", type=float, default=0, help="percent of subscribers an outside ranker is asked about"
    )
    parser.add_argument(
        "--embeddings", type=float, default=0, help="percent of subscribers whose embeddings model is interleaved"
    )
    parser.add_argument("--left-overs", action="store_true", help="history at the steady state (see above)")
    parser.add_argument("--warm", action="store_true", help="each timed pass keeps an earlier pass's caches")
    parser.add_argument("--database-url", default="", help="a PostgreSQL database to make the stores beside")
    args = parser.parse_args()
    if (args.models or args.ranker or args.embeddings) and args.database_url:
        parser.error("--models, --ranker and --embeddings build SQLite stores only; leave out --database-url")
    filters = list(zipf_choices(filter_expressions(), args.subscribers))
    with tempfile.TemporaryDirectory(prefix="digestbot-plan-") as tmp:
        folder = Path(tmp)
        settings = Settings.model_validate({"paths": {"var_dir": str(folder / "var")}})
        if args.ranker:
            ranker_mode(args, filters, folder)
            return
        if args.embeddings:
            embeddings_mode(args, filters, folder)
            return
        if args.models:
            models_mode(args, filters, folder, settings)
            return
        place = Place(folder, args.database_url)
        try:
            steady_state(args, filters, place, settings)
        finally:
            place.close()


def steady_state(args: argparse.Namespace, filters: list[str], place: Place, settings: Settings) -> None:
    """Plan today in a store without history and in one with *args.days* of it; print both and the ratio."""
    fresh_engine, fresh = store(place, "fresh", filters, args.days)
    fresh_s, fresh_n = timed_plans(place, "fresh", fresh_engine, fresh, settings, args.entries, args.repeat, args.warm)
    print(f"{args.subscribers:,} subscribers, no history:      plan {fresh_s:7.2f} s ({fresh_n:,} digests)")
    old_engine, old = store(place, "history", filters, args.days)
    rows = write_history(old, filters, args.days, args.entries, settings if args.left_overs else None)
    old_s, old_n = timed_plans(place, "history", old_engine, old, settings, args.entries, args.repeat, args.warm)
    kind = "at the steady state" if args.left_overs else "of history"
    print(
        f"{args.subscribers:,} subscribers, {args.days} days {kind}: plan {old_s:7.2f} s ({old_n:,} digests; "
        f"{rows:,} entries carried)"
    )
    passes = "passes keep the caches of one three hours earlier" if args.warm else "each pass a new process's first"
    store_kind = "PostgreSQL" if place.postgres else "SQLite"
    if args.left_overs:
        print(
            f"ratio steady/none: {old_s / fresh_s:.2f}  target <= 1.5; "
            f"{1000 * old_s / args.subscribers:.3f} ms a subscriber, target <= 0.3 ({store_kind}; {passes})"
        )
    else:
        print(f"ratio history/none: {old_s / fresh_s:.2f}  target <= 1.3 ({store_kind}; {passes})")


if __name__ == "__main__":
    main()
