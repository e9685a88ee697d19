"""Delivery throughput with 1, 2 and 4 worker processes on PostgreSQL.

Usage: DIGESTBOT_TEST_PG=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
       python bench/workers.py [--digests 4000] [--workers 1 2 4]

Each configuration gets a fresh schema with --digests queued digests and the
same in-process aiosmtpd sink on 127.0.0.1; prints messages/s per worker count.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select  # noqa: E402

from bot.store.engine import make_engine, sessions, upgrade  # noqa: E402
from bot.store.schema import Digest  # noqa: E402
from bot.tools.sink import Sink, SinkHandler  # noqa: E402
from tests.helpers import postgres_schema, queue_digests  # noqa: E402

DIGESTBOT = str(Path(sys.executable).parent / "digestbot")


def run(url0: str, digests: int, workers: int, tmp: Path) -> float:
    with postgres_schema(url0) as url, Sink(SinkHandler()) as sink:
        engine = make_engine(url)
        upgrade(engine)
        factory = sessions(engine)
        queue_digests(factory, digests)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
        env.update(
            DIGESTBOT_DATABASE__URL=url,
            DIGESTBOT_SMTP__PORT=str(sink.port),
            DIGESTBOT_PATHS__TEMPLATES_DIR=str(ROOT / "templates"),
            DIGESTBOT_PATHS__VAR_DIR=str(tmp),
            DIGESTBOT_SMTP__POOL_SIZE="4",
            DIGESTBOT_WEB__SIGNING_KEY="bench-signing-key-0123456789",
        )
        started = time.perf_counter()
        procs = [
            subprocess.Popen([DIGESTBOT, "worker"], env=env, cwd=tmp, stderr=subprocess.DEVNULL) for _ in range(workers)
        ]
        try:
            while True:
                with factory() as session:
                    sent = session.scalar(select(func.count()).select_from(Digest).where(Digest.state == "sent"))
                if sent == digests:
                    break
                time.sleep(0.2)
            elapsed = time.perf_counter() - started
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(timeout=60)
        assert len(sink.received) == digests
        engine.dispose()
        return digests / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--digests", type=int, default=4000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    url = os.environ.get("DIGESTBOT_TEST_PG")
    if not url:
        sys.exit("set DIGESTBOT_TEST_PG to a PostgreSQL URL (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)")
    tmp = Path("/tmp/digestbot-bench-workers")
    tmp.mkdir(exist_ok=True)
    base = None
    for n in args.workers:
        rate = run(url, args.digests, n, tmp)
        base = base or rate
        print(f"{n} worker(s): {rate:7.1f} messages/s  ({rate / base:.2f}x of {args.workers[0]})", flush=True)


if __name__ == "__main__":
    main()
