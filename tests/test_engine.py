"""The store's engine (``bot.store.engine``): how writers of one process share SQLite's
one write lock."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from bot.store.engine import make_engine, sessions, transaction

HOLD_SECONDS = 0.02
WRITERS = 24


def test_writers_of_one_process_take_turns_instead_of_timing_out(migrated_sqlite: Path, tmp_path: Path) -> None:
    """SQLite's busy handler polls with growing sleeps and is not fair: with many writer
    threads, one can wait past the busy timeout while the lock sits idle between turns.
    Writers of one process queue for it instead, so each waits only for those ahead."""
    shutil.copyfile(migrated_sqlite, tmp_path / "store.sqlite3")
    # Far less than the WRITERS × HOLD_SECONDS the last of them waits in all.
    engine = make_engine(f"sqlite:///{tmp_path / 'store.sqlite3'}", busy_timeout_ms=100)
    factory = sessions(engine)
    failures: list[str] = []
    start = threading.Barrier(WRITERS)

    def write() -> None:
        start.wait()
        try:
            with transaction(factory) as session:
                session.execute(text("UPDATE subscribers SET updated_at = updated_at"))
                time.sleep(HOLD_SECONDS)
        except OperationalError as exc:
            failures.append(str(exc.orig))

    threads = [threading.Thread(target=write) for _ in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine.dispose()
    assert failures == []
