"""Taste stage: the process a library file uploaded on the manage page is read in
(``python -m bot.taste.library_process``, started by ``bot.web.upload_process``).

The file comes on stdin; a ``LibraryRead`` (or the one-line error) goes out as JSON on
stdout.  The process limits its own memory and CPU time and gives way (``give_way``)
before it imports the reader, so that even its start-up yields to the endpoint that
answers unsubscribes; it imports nothing of the endpoint, the store or the mail.
Never reads the store.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys

MEMORY_BYTES = 1 << 30  # a 5 MB export needs a few hundred MB at most
CPU_SECONDS = 120


def give_way() -> None:
    """Run only on a core nothing else wants (Linux's ``SCHED_IDLE``), at the lowest
    priority where that policy is missing.  At nice 19 alone a reader keeps its core for
    the rest of its time slice when the endpoint wakes on that core; an idle-policy
    process gives the core up at once, and the scheduler places a waking endpoint on its
    core as on an idle one."""
    os.nice(19)
    if hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):  # a sandbox that refuses the policy: nice 19 it is
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    give_way()
    from dataclasses import asdict

    from bot.taste.library import MAX_BYTES, LibraryFileError, read_library

    data = sys.stdin.buffer.read(MAX_BYTES + 1)
    try:
        read = read_library(data)
    except LibraryFileError as exc:
        json.dump({"error": str(exc)}, sys.stdout)
        return
    papers = [asdict(paper) for paper in read.papers]
    json.dump({"papers": papers, "problems": read.problems, "format": read.format}, sys.stdout)


if __name__ == "__main__":
    main()
