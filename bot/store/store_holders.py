"""Store: which processes hold a SQLite store open, so that an operation on the whole
store (restore, copy) runs only when nothing else may write it.

Every digestbot process that opens a SQLite store (the scheduler, workers, ``serve``
and each of its workers, every command) holds a shared ``flock`` on ``<store>.lock``
for as long as it runs; the kernel drops it when the process ends, however it ends.
``alone`` takes that lock exclusively, so it is refused while any other process holds
the store, and every process that opens the store meanwhile is refused in turn.  Who
holds it is read from ``/proc/locks``, for the message.  Never runs SQL.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bot.store.store_errors import StoreError
from bot.store.store_files import holders_lock, wal_file

_HELD: dict[Path, int] = {}  # lock file -> this process's descriptor, shared-locked
_HELD_BEFORE: dict[Path, bool] = {}  # lock file -> whether it was there when this process came
_LOCK = threading.Lock()


class StoreInUse(StoreError):
    """Another process holds the store (``str()``: the one line naming who)."""


# How long a process waits for another that holds a new, still empty store to write it.
NEW_STORE_SECONDS = 10.0


def emptied(store: Path) -> bool:
    """Whether *store* is an empty file although a digestbot process used it before (its
    lock file says so): truncated, not new, which SQLite would take for a new store.
    Another process holding it may be making it right now: it is waited for."""
    deadline = time.monotonic() + NEW_STORE_SECONDS
    while _empty(store):
        if not _HELD_BEFORE.get(holders_lock(store).absolute(), False):
            return False  # never opened by digestbot: a new store
        if not holders(holders_lock(store), exclude=os.getpid()) or time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False


def _empty(store: Path) -> bool:
    wal = wal_file(store)
    return store.is_file() and store.stat().st_size == 0 and not (wal.is_file() and wal.stat().st_size > 0)


def hold(store: Path) -> None:
    """Hold *store* open for the life of this process (shared with every other digestbot
    process); ``StoreInUse`` while an operation on the whole store runs.  A folder that
    cannot be written holds nothing: nothing there can be restored or copied into either."""
    path = holders_lock(store).absolute()
    with _LOCK:
        if path in _HELD:
            return
        _HELD_BEFORE[path] = path.exists()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            who = ", ".join(holders(path, exclude=os.getpid())) or "another digestbot process"
            raise StoreInUse(f"{store}: {who} is restoring or copying it; try again when it is done") from None
        _HELD[path] = fd


def release_all() -> None:
    """Let go of every store this process holds (what its end would do), for a command
    run inside a longer-lived process."""
    with _LOCK:
        for fd in _HELD.values():
            os.close(fd)
        _HELD.clear()


@contextmanager
def alone(store: Path, doing: str) -> Iterator[None]:
    """Hold *store* alone for the block: ``StoreInUse`` naming the other processes that
    hold it (stop them before *doing*); meanwhile any process that would open it is
    refused.  This process's own hold, if any, is kept on the way out."""
    path = holders_lock(store).absolute()
    with _LOCK:
        shared = path in _HELD
        try:
            fd = _HELD[path] if shared else os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise StoreError(f"{path}: cannot be created to hold the store alone: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # A refused conversion may have dropped this process's shared lock: take it again.
            _give_back(fd, shared)
            who = holders(path, exclude=os.getpid())
            named = ", ".join(who) if who else "another digestbot process"
            raise StoreInUse(
                f"{store}: {named} has it open; stop {'them' if len(who) > 1 else 'it'} before {doing}"
            ) from None
    try:
        yield
    finally:
        with _LOCK:
            _give_back(fd, shared)


def _give_back(fd: int, shared: bool) -> None:
    if shared:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # another process took it alone in between: it will refuse us
            pass
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def holders(path: Path, *, exclude: int) -> list[str]:
    """The processes holding a lock on *path*, as ``digestbot serve (pid 123)``, from
    ``/proc/locks`` (Linux); [] where it cannot be read."""
    try:
        inode = os.stat(path).st_ino
        with open("/proc/locks", encoding="ascii", errors="replace") as listing:
            lines = listing.read().splitlines()
    except OSError:
        return []
    pids: dict[int, None] = {}
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  READ  1234 fe:00:5678 0 EOF"; a waiting lock has "->" first.
        if "->" in fields or len(fields) < 6:
            continue
        pid, where = fields[4], fields[5]
        if where.rsplit(":", 1)[-1] == str(inode) and pid.isdigit() and int(pid) != exclude:
            pids[int(pid)] = None
    return [f"{_command_of(pid)} (pid {pid})" for pid in pids]


def _command_of(pid: int) -> str:
    """``digestbot serve`` for a process started as ``.../bin/python .../bin/digestbot serve --port 8080``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = [part.decode("utf-8", "replace") for part in cmdline.read().split(b"\0") if part]
    except OSError:
        return "a process"
    argv = _without_interpreter(argv)
    if not argv:
        return "a process"
    words = [arg for arg in argv[1:] if arg.isascii() and arg.isalpha() and arg.islower()][:2]
    return " ".join([Path(argv[0]).name, *words])


def _without_interpreter(argv: list[str]) -> list[str]:
    """The script or module a Python process runs, with its arguments."""
    if not argv or not Path(argv[0]).name.startswith("python"):
        return argv
    rest = argv[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[1:] if rest[0] != "-c" else []
    return rest[1:] if rest[:1] == ["-m"] else rest or [Path(argv[0]).name]
