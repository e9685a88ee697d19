"""Writing a file whole, never through a link someone planted beside it.

A file digestbot writes (a report, a preview, a key, a backup, the starter) is written
to a temporary file created exclusively (``O_EXCL``, which refuses a link, under a name
nobody can guess: ``tempfile.mkstemp``) in the target's folder, then renamed over the
target.  A rename replaces a link at the target instead of writing through it, and a
reader never sees half a file.  Never decides what to write.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def exclusive_file(near: Path, *, mode: int = 0o600) -> Path:
    """A new empty file named after *near* (its name, a random part, ``.partial``),
    created exclusively with *mode*: for a caller that fills it and renames it itself."""
    fd, name = tempfile.mkstemp(dir=near.parent, prefix=f"{near.name}.", suffix=".partial")
    os.fchmod(fd, mode)
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def fresh_file(target: Path, *, mode: int = 0o644) -> Iterator[Path]:
    """A new empty file beside *target*, created exclusively with *mode*, yielded for the
    caller to fill (a program that opens it by name, such as SQLite, included); renamed
    over *target* when the block ends without an error, removed otherwise."""
    partial = exclusive_file(target.with_name(f".{target.name}"), mode=mode)
    try:
        yield partial
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def write_whole(target: Path, data: bytes, *, mode: int = 0o644) -> None:
    """*data* as *target*'s content, all of it or none (``fresh_file``)."""
    with fresh_file(target, mode=mode) as partial:
        descriptor = os.open(partial, os.O_WRONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
