"""Running the bot: how many malloc arenas a long-lived process keeps.

glibc gives each thread that allocates its own arena (up to eight a core).  A
worker builds each batch in a thread and sends it from the event loop's thread,
so the large buffers of one batch are freed into one arena and the next batch's
are taken from another: each arena keeps its own high-water mark, and the
process's peak grows with them (bench/README.md, "Memory of a worker").  One
arena shared by the threads keeps a single high-water mark; the threads take
turns under the GIL anyway.  Elsewhere than glibc this does nothing.  Never
raises: a process that cannot set it runs as before.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's <malloc.h>


def share_one_arena() -> bool:
    """Ask glibc to keep one malloc arena for every thread of this process; call it
    before the process starts threads.  True when glibc took it."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to set
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    taken = bool(mallopt(M_ARENA_MAX, 1))
    if not taken:
        log.debug("mallopt(M_ARENA_MAX, 1) refused; threads keep their own arenas")
    return taken
