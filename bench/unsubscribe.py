"""Unsubscribe burst benchmark: one-click POSTs against a real `digestbot serve` while a
real `digestbot worker` delivers to the same subscribers and writes the same store.

Usage: python bench/unsubscribe.py [--requests 5000] [--concurrency 200] [--workers 1] [--pg URL]
                                  [--no-delivery] [--forged N]

Queues one digest for each of --requests subscribers, starts the worker (into Postfix's
smtp-sink when installed, else the in-process sink of bot.tools.sink) and the endpoint, waits
until the delivery is under way, then POSTs one unsubscribe per subscriber at
--concurrency.  With --forged N, another client (from 127.0.0.2) POSTs N forged tokens at
concurrency 50 meanwhile.  Prints the rate, p50/p99 latency and status codes of the burst
(and the flood's answers), how many digests the worker delivered meanwhile, and, once the
journal is applied, how many acknowledged unsubscribes the store holds (lost =
acknowledged but not applied).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select  # noqa: E402

from bot.store.engine import make_engine, sessions, upgrade  # noqa: E402
from bot.store.schema import Digest, SubscriberRow  # noqa: E402
from bot.tokens import make_token  # noqa: E402
from bot.tools.sink import Sink, SinkHandler, free_port  # noqa: E402
from bot.unsubscribes import journal_of  # noqa: E402
from tests.helpers import DIGESTBOT, postgres_schema, queue_digests  # noqa: E402

KEY = "bench-signing-key-" + "k" * 16
BODY = b"List-Unsubscribe=One-Click"


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"no {what} within {seconds:g} s")
        time.sleep(0.05)


def answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


async def burst(
    port: int, tokens: list[str], concurrency: int, source: str = "127.0.0.1", acked: dict[int, float] | None = None
) -> tuple[list[float], Counter[str], float]:
    """POST one unsubscribe per token over *concurrency* keep-alive connections from *source*;
    *acked* gets, per subscriber id, the wall-clock time of their 200.

    A small HTTP/1.1 client on asyncio streams: httpx's pool costs more CPU per request
    than the endpoint at this concurrency, and would measure itself."""
    latencies: list[float] = []
    codes: Counter[str] = Counter()
    queue = list(reversed(tokens))

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        try:
            while queue:
                token = queue.pop()
                request = (
                    f"POST /u/{token} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(BODY)}\r\n\r\n"
                ).encode("ascii") + BODY
                started = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - started)
                code = head.split(b" ", 2)[1].decode()
                codes[code] += 1
                if acked is not None and code == "200":
                    acked[int(token.split(".")[0])] = time.time()
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            codes[type(exc).__name__] += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return latencies, codes, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--pg", help="a PostgreSQL URL (a throw-away schema is used)")
    parser.add_argument("--no-delivery", action="store_true", help="the burst alone, no worker")
    parser.add_argument("--workers", type=int, default=1, help="digestbot serve --workers")
    parser.add_argument("--forged", type=int, default=0, help="forged tokens POSTed meanwhile by another client")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(postgres_schema(args.pg)) if args.pg else f"sqlite:///{folder / 'store.sqlite3'}"
        engine = make_engine(url)
        stack.callback(engine.dispose)
        upgrade(engine)
        factory = sessions(engine)
        queue_digests(factory, args.requests)
        with factory() as session:
            tokens = [
                make_token(KEY.encode(), sid, secret)
                for sid, secret in session.execute(select(SubscriberRow.id, SubscriberRow.unsubscribe_secret))
            ]
        smtp_port = free_port()
        if shutil.which("smtp-sink"):
            sink = subprocess.Popen(
                ["smtp-sink", "-u", "nobody", f"127.0.0.1:{smtp_port}", "1000"], stderr=subprocess.DEVNULL
            )
            stack.callback(sink.terminate)
        else:
            stack.enter_context(Sink(SinkHandler(), port=smtp_port))
        web_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
        env |= {
            "DIGESTBOT_DATABASE__URL": url,
            "DIGESTBOT_PATHS__VAR_DIR": str(folder / "var"),
            "DIGESTBOT_WEB__SIGNING_KEY": KEY,
            "DIGESTBOT_SMTP__PORT": str(smtp_port),
            "DIGESTBOT_SMTP__POOL_SIZE": "4",
        }
        processes = []
        commands = [["serve", "--port", str(web_port), "--workers", str(args.workers)]] + (
            [] if args.no_delivery else [["worker"]]
        )
        for command in commands:
            proc = subprocess.Popen([DIGESTBOT, *command], env=env, cwd=folder, stderr=subprocess.DEVNULL)
            processes.append(proc)
            stack.callback(proc.send_signal, signal.SIGTERM)
        wait_until(lambda: answers(web_port), 30, "answer from digestbot serve")

        def sent() -> int:
            with factory() as session:
                return session.scalar(select(func.count()).where(Digest.state == "sent")) or 0

        if not args.no_delivery:
            wait_until(lambda: sent() > 0, 60, "digest delivered")
        before = sent()
        forged = [t[:-4] + ("AAAA" if not t.endswith("AAAA") else "BBBB") for t in tokens]
        forged = (forged * (args.forged // len(forged) + 1))[: args.forged]

        acked: dict[int, float] = {}

        async def bursts() -> tuple[tuple[list[float], Counter[str], float], Counter[str] | None]:
            valid = burst(web_port, tokens, args.concurrency, acked=acked)
            if not forged:
                return await valid, None
            measured, (_, flood, _) = await asyncio.gather(valid, burst(web_port, forged, 50, "127.0.0.2"))
            return measured, flood

        (latencies, codes, spent), flood = asyncio.run(bursts())
        during = sent() - before
        journal = journal_of(factory)
        wait_until(lambda: not journal.pending_subscribers(), 120, "journal applied")
        with factory() as session:
            left = session.scalar(select(func.count()).where(SubscriberRow.status == "unsubscribed")) or 0
        cuts = statistics.quantiles(latencies, n=100)
        print(
            f"store: {'PostgreSQL' if args.pg else 'SQLite'}; serve --workers {args.workers}; "
            f"{len(tokens):,} POSTs at concurrency {args.concurrency}"
        )
        print(f"rate: {len(tokens) / spent:,.0f} requests/s ({spent:.2f} s)")
        print(
            f"latency: p50 {cuts[49] * 1000:.0f} ms, p99 {cuts[98] * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
        )
        print(f"answers: {dict(codes)}")
        if flood is not None:
            print(f"forged flood from 127.0.0.2: {len(forged):,} POSTs, answers {dict(flood)}")
        print(f"delivered by the worker during the burst: {during:,} digests")
        acknowledged = codes.get("200", 0)
        print(
            f"acknowledged: {acknowledged:,}; unsubscribed in the store: {left:,}; lost: {max(0, acknowledged - left)}"
        )
        if not args.no_delivery:
            print(after_the_click(factory, acked))


def after_the_click(factory, acked: dict[int, float]) -> str:  # noqa: ANN001 - a sessionmaker
    """How long after their one-click was acknowledged readers were still sent a digest
    (its ``sent_at`` is written up to bot.delivery.outcomes.RECORD_SECONDS after the 250)."""
    with factory() as session:
        sent = session.execute(select(Digest.subscriber_id, Digest.sent_at).where(Digest.state == "sent")).all()
    late = sorted(at.timestamp() - acked[sid] for sid, at in sent if sid in acked and at.timestamp() > acked[sid])
    if not late:
        return "sent after their one-click was acknowledged: 0 digests"
    return (
        f"sent after their one-click was acknowledged: {len(late):,} digests, recorded up to "
        f"{late[-1] * 1000:,.0f} ms after it (p50 {statistics.median(late) * 1000:,.0f} ms)"
    )


if __name__ == "__main__":
    main()
