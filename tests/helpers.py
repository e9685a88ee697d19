"""Helpers several test modules share (test modules never import each other)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

_ENTRY = (
    "A study of kernel fusion number {i} for serving large language models on GPUs\n\n"
    "Ada Lovelace, Grace Hopper, Edsger Dijkstra 2026-06-14\n\n"
    "Problem: serving is memory bound. Method: fuse attention and MLP kernels, schedule {i} batches "
    "with a KV cache that pages to host memory; $1.45\\times$ faster than the baseline on A100 and "
    "H100 parts, with https://example.org/{i} as the artifact. Results hold across models from 7B to "
    "70B parameters and across batch sizes; the code is open source.\n\n"
    "PDF\n\n"
)


def dump_of_size(size: int) -> bytes:
    """A well-formed text dump of distinct papers, at least *size* bytes long."""
    parts: list[str] = []
    total = i = 0
    while total < size:
        part = _ENTRY.format(i=i)
        parts.append(part)
        total += len(part)
        i += 1
    return "".join(parts).encode()


# The installed console script next to this interpreter: the command a user runs.
DIGESTBOT = shutil.which("digestbot", path=str(Path(sys.executable).parent)) or "digestbot"
