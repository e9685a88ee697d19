"""Subscriber endpoint: a library file read in a process of its own (``read_upload``).

Reading a file of megabytes as BibTeX, RIS or CSL-JSON is seconds of CPU: in the
endpoint's process that work would hold the interpreter's lock, and a one-click
unsubscribe would wait for it.  So the file goes to a child process
(``CHILD``: ``bot.taste.library_process``), which gives way to other work before it imports
anything heavy, reads it (``bot.taste.library``), answers with JSON on stdout, limits
its own memory and CPU time, and is killed when it takes longer than it may.  Never
reads the store.
"""

from __future__ import annotations

import asyncio
import json
import sys

from bot.domain import LibraryPaper
from bot.taste.library import LibraryFileError, LibraryRead

CHILD = (sys.executable, "-m", "bot.taste.library_process")


async def read_upload(data: bytes, seconds: float) -> LibraryRead:
    """``read_library(data)`` in a child process; ``LibraryFileError`` when the file
    cannot be read at all, or the child fails or is not done within *seconds*."""
    child = await asyncio.create_subprocess_exec(
        *CHILD,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        out, _ = await asyncio.wait_for(child.communicate(data), seconds)
    except TimeoutError:
        raise LibraryFileError(f"it took longer than {seconds:g} s to read") from None
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if child.returncode != 0 or not isinstance(answer, dict):
        raise LibraryFileError("it could not be read (it needs more memory or time than an upload may take)")
    if "error" in answer:
        raise LibraryFileError(str(answer["error"]))
    return LibraryRead(
        papers=[LibraryPaper(**paper) for paper in answer["papers"]],
        problems=[str(p) for p in answer["problems"]],
        format=str(answer["format"]),
    )
