"""Mail stage: the pool that holds the constant bytes of many message templates once.
Pure bookkeeping over bytes; never renders, encodes or sends."""

from __future__ import annotations

import zlib
from typing import Any


class ChunkPool:
    """Constant template bytes, held once however many templates contain them.

    A day's bodies repeat each other: two filters that match the same entry
    print its title, summary and links in the same lines, so a day's bodies
    have far fewer distinct lines than lines.  Templates keep their constant
    bytes as chunks of about two lines interned here: one object per line would
    save a little more memory but make each message a tuple of hundreds of
    parts to pickle and join (bench/README.md).  A chunk ends after a line whose
    CRC-32 is even, so the cut depends on the line alone: a run of lines shared by two
    bodies is cut the same way in both, wherever it starts.  Chunks are counted
    per template that holds them and dropped with the last.
    """

    def __init__(self) -> None:
        self._uses: dict[bytes, list[Any]] = {}  # chunk -> [the interned object, number of uses]
        self.nbytes = 0  # distinct bytes held

    def __len__(self) -> int:
        return len(self._uses)

    def intern(self, data: bytes) -> tuple[bytes, ...]:
        """*data* (whole CRLF-ended lines) as interned chunks that join back to it."""
        chunks = []
        *lines, rest = data.split(b"\r\n")
        run: list[bytes] = []
        for line in lines:
            run.append(line)
            if zlib.crc32(line) & 1 == 0:
                chunks.append(self._use(b"\r\n".join(run) + b"\r\n"))
                run = []
        last = b"\r\n".join(run) + b"\r\n" if run else b""
        if last + rest:  # *rest*: a piece that does not end a line (none is made; kept whole)
            chunks.append(self._use(last + rest))
        return tuple(chunks)

    def _use(self, chunk: bytes) -> bytes:
        entry = self._uses.get(chunk)
        if entry is None:
            entry = self._uses[chunk] = [chunk, 0]
            self.nbytes += len(chunk)
        entry[1] += 1
        interned: bytes = entry[0]
        return interned

    def release(self, chunks: tuple[bytes, ...]) -> None:
        for chunk in chunks:
            entry = self._uses[chunk]
            entry[1] -= 1
            if entry[1] == 0:
                del self._uses[chunk]
                self.nbytes -= len(chunk)
