"""Send benchmark: one daily cycle (plan -> render -> send) for N subscribers into
Postfix's smtp-sink on 127.0.0.1, against what the machine and a naive sender do.

Usage: python bench/send.py [--subscribers 100000] [--entries 300] [--sessions 8]
                            [--baseline 1000] [--build-processes 1] [--sqlite-cache-mb 64]
                            [--no-send]

Needs smtp-sink and smtp-source (Debian: apt-get install postfix); installs nothing.
Generates --entries new entries for the day (realistic tags: three dump header tags,
the shipped tag rules) and --subscribers subscribers whose filters are drawn from 200
distinct expressions with a Zipf-like popularity, then prints:

  * plan: seconds to queue every subscriber's digest (the real planner);
  * render: seconds to build every queued message (the real Mailer, nothing sent);
  * send: seconds for the real delivery path (build + SMTP, smtp.pool_size = --sessions,
    digest.build_processes = --build-processes);
  * digests/s end to end (plan, then send), and its ratio to smtp-source pushing as many
    messages of the same average size over the same number of sessions (half just before
    the delivery, half just after, so that a drift of the machine's speed evens out), and to a naive
    sender (per subscriber: Jinja render + EmailMessage + send on one aiosmtplib
    connection) measured on --baseline subscribers;
  * messages/s of the SMTP path alone (the same pool sending one prepared message
    of the average size, nothing built or recorded), against smtp-source;
  * peak RSS of the process that runs the daily cycle (plan, render, send), started fresh
    after set-up as `digestbot worker` would be, and of this process during set-up (it
    generates the subscribers and the day's dump, which no digestbot process does).

--no-send stops after plan and render (for memory runs at large N).
--templates DIR renders with another templates folder (a copy without one feature
prices that feature per message).
--dkim plans, then renders every message three times, unsigned and DKIM-signed with an
RSA-2048 and an Ed25519 key (dkim.*), and prints what signing costs per message
(needs openssl for the RSA key); it sends nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiosmtplib  # noqa: E402
from sqlalchemy import select  # noqa: E402

from bot.choose.tagging import load_rules  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_bytes  # noqa: E402
from bot.mail.mailer import Mailer
from bot.mail.message import SmtpData  # noqa: E402
from bot.mail.parts import Parts
from bot.plan import plan  # noqa: E402
from bot.store.bulk import allocate_ids, bulk_insert  # noqa: E402
from bot.store.digests import get_digest, get_digests  # noqa: E402
from bot.store.engine import make_engine, sessions, transaction, upgrade  # noqa: E402
from bot.store.schema import Digest, SubscriberRow  # noqa: E402
from bot.tools.sink import free_port  # noqa: E402
from tests.helpers import dump_text, filter_expressions  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)


def zipf_choices(items: list[str], n: int, *, s: float = 1.1, seed: int = 1, chunk: int = 5_000) -> Iterator[str]:
    """*n* draws from *items* with a Zipf-like popularity, generated a chunk at a time."""
    weights = list(itertools.accumulate(1 / (rank + 1) ** s for rank in range(len(items))))
    rng = random.Random(seed)
    for start in range(0, n, chunk):
        yield from rng.choices(items, cum_weights=weights, k=min(chunk, n - start))


def add_subscribers(
    factory,
    filters: Iterable[str],
    *,
    created: datetime = DAY - timedelta(days=1),
    chunk: int = 5_000,
) -> set[str]:
    """One subscriber per filter, inserted in bulk (CSV import validates each row; not measured
    here); returns the distinct filters.  Chunked, so set-up memory does not grow with N."""
    distinct: set[str] = set()
    iterator = iter(filters)
    while part := list(itertools.islice(iterator, chunk)):
        distinct.update(part)
        with transaction(factory) as session:
            ids = list(allocate_ids(session, SubscriberRow.__table__, len(part)))
            bulk_insert(
                session,
                SubscriberRow.__table__,
                [
                    {
                        "id": sid,
                        "email": f"reader{sid}@example.org",
                        "email_key": f"reader{sid}@example.org",
                        "name": f"Reader {sid}",
                        "filter": f,
                        "timezone": "UTC",
                        "send_hour": 8,
                        "status": "active",
                        "backfill": "1d",
                        "unsubscribe_secret": f"{sid:032x}",
                        "bounces": 0,
                        "created_at": created,
                        "updated_at": created,
                    }
                    for sid, f in zip(ids, part, strict=True)
                ],
            )
    return distinct


def queued_batches(factory, batch: int = 200) -> Iterator[list[int]]:
    """The queued digest ids in batches of *batch*, read page by page (a million ids in
    one list would be 36 MB of the memory run's budget).  The planner queued them all
    at DAY: with next_attempt_at pinned, each page is a range of ix_digests_due (state,
    next_attempt_at, id) instead of a sort of every queued digest."""
    after = 0
    while True:
        with factory() as session:
            ids = list(
                session.scalars(
                    select(Digest.id)
                    .where(Digest.state == "queued", Digest.next_attempt_at == DAY, Digest.id > after)
                    .order_by(Digest.id)
                    .limit(batch)
                )
            )
        if not ids:
            return
        yield ids
        after = ids[-1]


def render_all(factory, settings: Settings) -> tuple[float, int, float]:
    """(seconds, messages, average bytes) to build every queued message without sending
    it, batch by batch as delivery does (the message bytes are dropped after counting)."""
    mailer = Mailer(Parts(settings))
    total = count = 0
    started = time.perf_counter()
    for ids in queued_batches(factory):
        with factory() as session:
            built = mailer.build(session, get_digests(session, ids), DAY, for_wire=True)
        assert all(b.error is None for b in built)
        total += sum(b.data.size if isinstance(b.data, SmtpData) else len(b.data) for b in built)
        count += len(built)
        del built
    return time.perf_counter() - started, count, total / max(count, 1)


def dkim_costs(factory, settings: Settings, unsigned_s: float, count: int, folder: Path) -> None:
    """Render every queued message again, signed with each key type, and print the cost."""
    import base64

    from nacl.signing import SigningKey

    rsa = folder / "dkim-rsa.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(rsa), "2048"], check=True, capture_output=True)
    ed25519 = folder / "dkim-ed25519.key"
    ed25519.write_bytes(base64.b64encode(bytes(SigningKey.generate())))
    for algorithm, key in (("rsa-sha256", rsa), ("ed25519-sha256", ed25519)):
        dkim = {"domain": "bench.example", "selector": "bench", "key_file": str(key), "algorithm": algorithm}
        signed = settings.model_copy(update={"dkim": settings.dkim.model_copy(update=dkim)})
        seconds, rendered, size = render_all(factory, signed)
        assert rendered == count
        extra = (seconds - unsigned_s) / count * 1000
        print(
            f"render with DKIM {algorithm}: {seconds:8.2f} s ({count / seconds:,.0f} messages/s): "
            f"{extra:.2f} ms per message to sign, {seconds / unsigned_s:.2f} x unsigned"
        )


def smtp_source_rate(port: int, count: int, size: int, sessions_: int) -> float:
    started = time.perf_counter()
    subprocess.run(
        [
            "smtp-source",
            "-s",
            str(sessions_),
            "-m",
            str(count),
            "-l",
            str(size),
            "-f",
            "bench@example.org",
            "-t",
            "reader@example.org",
            f"127.0.0.1:{port}",
        ],
        check=True,
        capture_output=True,
    )
    return count / (time.perf_counter() - started)


def wire_rate(port: int, count: int, size: int, sessions_: int) -> float:
    """Messages/s of the delivery's SMTP path alone: one prepared message of *size*
    bytes sent *count* times over a pool of *sessions_* connections, nothing built,
    nothing recorded (what the sender could do if building and the store cost nothing)."""
    from pydantic import SecretStr

    from bot.config import SmtpConfig
    from bot.delivery.smtp import SmtpPool
    from bot.mail.message import prepared

    line = b"x" * 74 + b"\r\n"
    message = prepared(b"Subject: wire\r\n\r\n" + line * max(1, size // len(line)))
    assert message is not None

    async def run() -> float:
        config = SmtpConfig(host="127.0.0.1", port=port, tls="none", pool_size=sessions_, timeout_seconds=60)
        async with SmtpPool(config, SecretStr("")) as pool:
            started = time.perf_counter()
            sends = (pool.send("bench@bench.example", f"r{n}@bench.example", message) for n in range(count))
            results = await asyncio.gather(*sends)
            elapsed = time.perf_counter() - started
        assert all(r is not None and r.outcome == "sent" for r in results), results[0]
        return count / elapsed

    return asyncio.run(run())


def naive_rate(factory, settings: Settings, ids: list[int], port: int) -> float:
    """Per subscriber: Jinja render + EmailMessage + serialize, sent on one aiosmtplib connection."""
    mailer = Mailer(Parts(settings))

    async def run() -> float:
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=30)
        await client.connect()
        started = time.perf_counter()
        with factory() as session:
            for digest_id in ids:
                row = get_digest(session, digest_id)
                assert row is not None
                data, sender, recipient = mailer.message_bytes(session, row, DAY)
                await client.sendmail(sender, [recipient], data)
        elapsed = time.perf_counter() - started
        await client.quit()
        return len(ids) / elapsed

    return asyncio.run(run())


def children_cpu() -> float:
    """CPU seconds of this process's ended children (the build processes, once shut down)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """CPU seconds a running process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM: unlike ru_maxrss, it does not carry
    over the parent's peak into a process started by fork and exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def daily_cycle(path: str, settings: Settings, args: argparse.Namespace, setup_rss: float) -> None:
    """Plan, render and (unless --no-send) send, then print the figures."""
    engine = make_engine(f"sqlite:///{path}", sqlite_cache_mb=args.sqlite_cache_mb)
    factory = sessions(engine)
    port = settings.smtp.port
    print(f"daily cycle's process started: peak RSS {peak_rss_mb():.0f} MB (imports and engine)")
    started = time.perf_counter()
    planned = plan(factory, settings, RULES, now=DAY, all_due=True)
    plan_s = time.perf_counter() - started
    queued = len(planned.planned)
    print(f"plan:   {plan_s:8.2f} s  ({queued:,} digests, {planned.empty:,} empty; peak RSS {peak_rss_mb():.0f} MB)")
    del planned
    render_s, rendered, size = render_all(factory, settings)
    assert rendered == queued, (rendered, queued)
    print(
        f"render: {render_s:8.2f} s  ({queued / render_s:,.0f} messages/s, average {size / 1000:.1f} KB; "
        f"peak RSS {peak_rss_mb():.0f} MB)"
    )
    if args.dkim:
        dkim_costs(factory, settings, render_s, queued, Path(path).parent)
        return
    if args.no_send:
        print_peak_rss(setup_rss)
        return

    sink = subprocess.Popen(
        ["smtp-sink", "-u", "nobody", f"127.0.0.1:{port}", "1000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(0.3)
        # smtp-source sends as many messages as the delivery, half just before it and half
        # just after: the machine's speed drifts, and the ratio should not catch a drift.
        half = max(queued, 1000) // 2
        before = smtp_source_rate(port, half, int(size), args.sessions)
        cpu_before = (time.process_time(), children_cpu(), process_cpu(sink.pid))
        started = time.perf_counter()
        report = asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY))
        send_s = time.perf_counter() - started
        cpu = [
            after - before
            for before, after in zip(
                cpu_before, (time.process_time(), children_cpu(), process_cpu(sink.pid)), strict=True
            )
        ]
        assert report.sent == queued, report
        end_to_end = queued / (plan_s + send_s)
        print(f"send:   {send_s:8.2f} s  ({report.sent / send_s:,.0f} messages/s, {args.sessions} connections)")
        print(
            "        CPU a message: sender {:.2f} ms, build processes {:.2f} ms, smtp-sink {:.2f} ms".format(
                *(1000 * seconds / queued for seconds in cpu)
            )
        )
        after = smtp_source_rate(port, half, int(size), args.sessions)
        source = 2 / (1 / before + 1 / after)  # both halves' messages over both halves' time
        print(
            f"smtp-source, {args.sessions} sessions, {size / 1000:.1f} KB: {source:,.0f} messages/s "
            f"({before:,.0f} before the delivery, {after:,.0f} after)"
        )
        wire = wire_rate(port, half, int(size), args.sessions)
        print(
            f"the SMTP path alone (one prepared message, nothing built or recorded): {wire:,.0f} messages/s "
            f"= {wire / source:.2f} x smtp-source"
        )
        with transaction(factory) as session:  # requeue a sample for the naive sender
            sample = list(
                session.scalars(
                    select(Digest.id).where(Digest.state == "sent").order_by(Digest.id).limit(args.baseline)
                )
            )
            session.execute(Digest.__table__.update().where(Digest.id.in_(sample)).values(state="queued"))
        naive = naive_rate(factory, settings, sample, port)
        print(f"naive sender (render + EmailMessage + one connection): {naive:,.0f} messages/s")
    finally:
        sink.terminate()
        sink.wait(5)
    print(
        f"end to end (plan, then send): {end_to_end:,.0f} digests/s = {end_to_end / source:.3f} x smtp-source "
        f"(target >= 0.5), {end_to_end / naive:.2f} x naive"
    )
    print_peak_rss(setup_rss)


def print_peak_rss(setup_rss: float) -> None:
    print(
        f"peak RSS of the daily cycle's process: {peak_rss_mb():.0f} MB (of the benchmark's set-up: {setup_rss:.0f} MB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--baseline", type=int, default=1000, help="subscribers for the naive sender's rate")
    parser.add_argument("--build-processes", type=int, default=1, help="digest.build_processes for the send phase")
    parser.add_argument("--sqlite-cache-mb", type=int, default=64, help="database.sqlite_cache_mb")
    parser.add_argument(
        "--templates", type=Path, default=ROOT / "templates", help="paths.templates_dir (to price a template change)"
    )
    parser.add_argument("--no-send", action="store_true")
    parser.add_argument("--dkim", action="store_true", help="the cost of DKIM signing (RSA and Ed25519); sends nothing")
    args = parser.parse_args()
    if not (args.no_send or args.dkim) and not (shutil.which("smtp-sink") and shutil.which("smtp-source")):
        sys.exit("bench/send.py needs smtp-sink and smtp-source on PATH (Debian: apt-get install postfix)")

    with tempfile.TemporaryDirectory(prefix="digestbot-send-") as tmp:
        folder = Path(tmp)
        engine = make_engine(f"sqlite:///{folder / 'send.sqlite3'}", sqlite_cache_mb=args.sqlite_cache_mb)
        upgrade(engine)
        factory = sessions(engine)
        port = free_port()
        settings = Settings.model_validate(
            {
                "paths": {"var_dir": str(folder / "var"), "templates_dir": str(args.templates)},
                "smtp": {"port": port, "pool_size": args.sessions, "timeout_seconds": 60},
                "digest": {"build_processes": args.build_processes},
                "database": {"sqlite_cache_mb": args.sqlite_cache_mb},
                "sender": {"from_address": "digest@bench.example", "from_name": "Bench Digest"},
                "web": {"public_url": "https://digest.bench.example", "signing_key": "bench-signing-key-0123456789"},
            }
        )
        ingest_bytes(
            factory, dump_text(args.entries, seed=3).encode(), name="today", now=DAY - timedelta(hours=2), rules=RULES
        )
        distinct = add_subscribers(factory, zipf_choices(filter_expressions(), args.subscribers))
        print(f"{args.subscribers:,} subscribers, {len(distinct)} distinct filters; {args.entries} new entries")

        engine.dispose()
        setup_rss = peak_rss_mb()
        # The daily cycle runs in a process of its own, as the worker does: its memory is
        # the pipeline's, not the set-up's.
        cycle = multiprocessing.get_context("spawn").Process(
            target=daily_cycle, args=(str(folder / "send.sqlite3"), settings, args, setup_rss)
        )
        cycle.start()
        cycle.join()
        if cycle.exitcode != 0:
            sys.exit(f"the daily cycle failed (exit code {cycle.exitcode})")


if __name__ == "__main__":
    main()
