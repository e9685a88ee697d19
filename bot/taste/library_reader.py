"""Taste stage: the process a library file uploaded on the manage page is read in
(``python -m bot.taste.library_reader``, started by ``bot.web.upload_reader``).

The file comes on stdin; a ``LibraryRead`` (or the one-line error) goes out as JSON on
stdout.  The process limits its own memory and CPU time and lowers its priority
before it imports the reader, so that even its start-up gives way to the endpoint
that answers unsubscribes; it imports nothing of the endpoint, the store or the mail.
Never reads the store.
"""

from __future__ import annotations

import json
import os
import resource
import sys

MEMORY_BYTES = 1 << 30  # a 5 MB export needs a few hundred MB at most
CPU_SECONDS = 120


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    os.nice(19)  # on a busy machine the endpoint that answers unsubscribes runs first
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
