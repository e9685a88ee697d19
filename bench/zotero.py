"""Zotero sync: requests and time of a pass, against tests/zotero_server.py as a process.

Usage: python bench/zotero.py [--readers 1000] [--items 10000] [--changes 10] [--most 100000]

Three figures, each printed with the requests the server counted and the wall time:
--readers connected readers whose libraries did not change (one sync pass: a 304
each), the first sync of one library of --items items, and its sync after --changes
items changed.  A SQLite store in a temporary folder; the server on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import insert  # noqa: E402
from sqlalchemy.orm import Session, sessionmaker  # noqa: E402

from bot.config.services import ZoteroConfig  # noqa: E402
from bot.sealed import Sealer  # noqa: E402
from bot.store.engine import make_engine, sessions, transaction, upgrade  # noqa: E402
from bot.store.zotero_tables import ZoteroConnectionRow  # noqa: E402
from bot.zotero.api import ZoteroApi  # noqa: E402
from bot.zotero.library_sync import Synced, sync_due  # noqa: E402
from tests.helpers import bulk_subscribers  # noqa: E402
from tests.zotero_server import ZoteroServer, zotero_server  # noqa: E402

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
SEALER = Sealer(b"q4GzQhSqfGQJtGHC2g2sD0x8X6L6o4m5E4Qb7n8y0kM=")
EVERY = timedelta(hours=6)


def _readers(
    factory: sessionmaker[Session], server: ZoteroServer, count: int, first_user: int
) -> list[tuple[int, str]]:
    """*count* subscribers, each with a connected library of one item, not synced yet."""
    made = []
    with transaction(factory) as session:
        ids = bulk_subscribers(session, count, now=NOW, first=first_user)
        for n, sid in enumerate(ids):
            user = first_user + n
            key = server.key(user)
            server.control("add", library=f"users/{user}", items=[{"title": f"Paper {n}", "DOI": f"10.1000/b{n}"}])
            session.execute(
                insert(ZoteroConnectionRow).values(
                    subscriber_id=sid,
                    library=f"users/{user}",
                    sealed_key=SEALER.seal(key),
                    can_write=True,
                    collections=[],
                    known_collections=[],
                    version=0,
                    state="new",
                    connected_at=NOW,
                )
            )
            made.append((sid, f"users/{user}"))
    return made


def timed_pass(
    factory: sessionmaker[Session],
    server: ZoteroServer,
    config: ZoteroConfig,
    at: datetime,
    only: list[int] | None = None,
    most: int = 100_000,
) -> tuple[list[Synced], int, float]:
    asked = server.requests()
    started = time.perf_counter()
    with ZoteroApi(config) as api:
        results = sync_due(factory, api, SEALER, at, every=EVERY, most=most, only=only)
    seconds = time.perf_counter() - started
    return results, server.requests() - asked, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", type=int, default=1000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--most", type=int, default=100_000, help="subscribers.library_max_papers (default 5,000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, zotero_server() as server:
        url = f"sqlite:///{Path(folder) / 'store.sqlite3'}"
        engine = make_engine(url)
        upgrade(engine)
        factory = sessions(engine)
        config = ZoteroConfig(base_url=server.url)

        _readers(factory, server, args.readers, 1)
        first, _, _ = timed_pass(factory, server, config, NOW)
        assert all(r.added == 1 for r in first), first[:3]
        results, requests, seconds = timed_pass(factory, server, config, NOW + EVERY + timedelta(minutes=1))
        assert all(r.unchanged for r in results) and len(results) == args.readers
        print(f"{args.readers:,} readers, nothing changed: {requests:,} requests, {seconds:.2f} s")

        ((big, library),) = _readers(factory, server, 1, 1_000_000)
        server.control("bulk", library=library, count=args.items - 1)
        (synced,), requests, seconds = timed_pass(factory, server, config, NOW, only=[big], most=args.most)
        assert synced.added == min(args.items, args.most), synced
        print(
            f"first sync of a {args.items:,}-item library: {requests:,} requests, {seconds:.2f} s "
            f"({synced.added:,} papers kept, library_max_papers {args.most:,})"
        )

        keys = [item["key"] for item in server.items(library)[: args.changes]]
        server.control("change", library=library, keys=keys, fields={"extra": "edited"})
        (synced,), requests, seconds = timed_pass(factory, server, config, NOW, only=[big], most=args.most)
        assert synced.problem is None, synced
        print(f"its sync after {args.changes} changes: {requests:,} requests, {seconds:.2f} s")
        engine.dispose()


if __name__ == "__main__":
    main()
