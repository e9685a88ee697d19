"""Who may do what when several processes share one database.

* Scheduler (watch + plan): exactly one active.  On PostgreSQL the leader holds
  a session advisory lock on a dedicated connection; standbys retry every few
  seconds and take over when the leader's connection dies (the server drops
  the lock with the session).  On SQLite an exclusive lock file stands in.
* Workers (deliver): any number on PostgreSQL (claims use SKIP LOCKED and
  leases); exactly one on SQLite, enforced with a lock file, because SQLite
  has a single writer and leases would only make workers queue on it.

Never plans or sends; only answers "am I allowed to".
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import IO

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url

from bot.store.session_locks import still_answers, try_session_lock
from bot.store.store_files import role_lock

log = logging.getLogger(__name__)

# An arbitrary, fixed 64-bit key: "digestbot scheduler".
SCHEDULER_LOCK_KEY = 0x6469676573746264


class RoleTaken(RuntimeError):
    """Another process already holds a role that admits only one."""


def _lock_file_path(engine: Engine, role: str) -> Path:
    database = make_url(str(engine.url)).database or "memory"
    return role_lock(Path(database), role)


class FileLock:
    """An exclusive, non-blocking flock next to the SQLite file; released on exit or crash."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: IO[str] | None = None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:  # never through a link planted at its name: the pid is written into it
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise RoleTaken(f"{self.path}: cannot be opened as a lock file ({exc.strerror}); remove it") from None
        handle = os.fdopen(fd, "r+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self.handle = handle
        return True

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None


def claim_sqlite_worker(engine: Engine) -> FileLock | None:
    """On SQLite, the single-worker lock (raise ``RoleTaken`` if held); None elsewhere."""
    if engine.dialect.name != "sqlite":
        return None
    lock = FileLock(_lock_file_path(engine, "worker"))
    if not lock.try_acquire():
        raise RoleTaken(
            f"another worker is already delivering from {make_url(str(engine.url)).database}; "
            "SQLite supports one worker (use PostgreSQL to run several)"
        )
    return lock


class Leadership:
    """Try to be the one scheduler; ``holds()`` is checked before every planning run."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._connection: Connection | None = None
        self._file: FileLock | None = None

    @property
    def is_leader(self) -> bool:
        return self._connection is not None or self._file is not None

    def try_acquire(self) -> bool:
        if self.is_leader:
            return self.holds()
        if self.engine.dialect.name != "postgresql":
            lock = FileLock(_lock_file_path(self.engine, "scheduler"))
            if lock.try_acquire():
                self._file = lock
            return self._file is not None
        connection = self.engine.connect()
        try:
            got = try_session_lock(connection, SCHEDULER_LOCK_KEY)
        except Exception:
            connection.close()
            raise
        if got:
            self._connection = connection
            return True
        connection.close()
        return False

    def holds(self) -> bool:
        """Still the leader?  A lost connection means the lock is gone too."""
        if self._file is not None:
            return True
        if self._connection is None:
            return False
        try:
            still_answers(self._connection)
            return True
        except Exception:
            log.warning("lost the scheduler lock's database connection; standing down")
            self.release()
            return False

    def release(self) -> None:
        if self._file is not None:
            self._file.release()
            self._file = None
        if self._connection is not None:
            try:
                self._connection.close()
            except Exception:
                pass
            self._connection = None
