"""Store: what a database error means for the person who ran the command, in one line
naming the file (or URL) and what to do.  Pure: never opens anything."""

from __future__ import annotations


class StoreError(Exception):
    """The store or its unsubscribe journal cannot be used (``str()``: the one line)."""


_READ_ONLY = (
    "it is read-only here (the file, its folder or the disk): digestbot writes it, and its -wal and -shm files "
    "beside it, even to read it; check the permissions, and that the disk is not mounted read-only"
)

# (what the database says, what we say); the first match wins.
_MEANINGS = (
    ("database or disk is full", "the disk holding it is full; nothing of this command was written: free some space"),
    ("no space left on device", "the disk holding it is full; nothing of this command was written: free some space"),
    ("readonly database", _READ_ONLY),
    ("file is not a database", "it is not a SQLite database: check database.url (or paths.var_dir)"),
    ("file is encrypted or is not a database", "it is not a SQLite database: check database.url (or paths.var_dir)"),
    (
        "unable to open database file",
        "it cannot be opened: is it a folder, or in a folder this user may not write?",
    ),
    ("disk i/o error", "the disk failed to read or write it: check the disk (dmesg), then restore a backup if needed"),
    ("database disk image is malformed", "it is damaged: restore a backup"),
    ("connection refused", "the database server does not answer: is it running, and is database.url right?"),
)


def said(exc: BaseException) -> str:
    """What the database (or the driver) said, on one line, without SQLAlchemy's wrapping."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]


def meaning(exc: BaseException, where: str, *, read_only: bool = False) -> str | None:
    """One line for the database error *exc* on *where* (*read_only*: the file or its
    folder cannot be written, which SQLite reports in several ways); None for one we
    cannot explain."""
    said = " ".join(str(getattr(exc, "orig", None) or exc).split())
    lowered = said.lower()
    if read_only and ("readonly" in lowered or "unable to open" in lowered):
        return f"{where}: {_READ_ONLY} ({said[:120]})"
    for marker, what in _MEANINGS:
        if marker in lowered:
            return f"{where}: {what} ({said[:120]})"
    return None


# SQLite's primary result code for "another connection holds the lock" (extended codes
# such as SQLITE_BUSY_SNAPSHOT keep it in their low byte).
_SQLITE_BUSY = 5


def is_busy(exc: BaseException) -> bool:
    """Whether *exc* is the store's lock still held when the busy timeout ran out: the
    work was not done and may simply be tried again."""
    code = getattr(getattr(exc, "orig", None), "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == _SQLITE_BUSY
