"""Domain types of the language-model stage (``bot.llm``): a TL;DR as stored and shown,
and an embedding as stored.  Small frozen dataclasses and pure functions; never I/O,
never the store."""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Tldr:
    """One entry's TL;DR in one language: plain text a model wrote (``bot.llm.tldr``
    let it through), shown marked as the model's, naming it."""

    text: str
    language: str
    model: str
    written_at: datetime


def chosen_language(choice: str | None, offered: Sequence[str]) -> str:
    """The offered language a reader's stored *choice* stands for: the offered tag it
    names in any case, else the first offered (no choice, or one no longer offered, or
    whatever a restored row holds)."""
    if choice:
        folded = choice.casefold()
        for language in offered:
            if language.casefold() == folded:
                return language
    return offered[0]


MAX_DIMENSIONS = 8192  # a vector longer than any embedding model's is not one
# Half floats: a unit vector's parts are within [-1, 1], where 11 bits of precision
# rank as well as 24, at half the bytes.
_HALF = "e"


def packed(vector: Sequence[float]) -> bytes | None:
    """*vector* scaled to unit length, as stored (``embeddings.vector``): little-endian
    half floats; None for what is no embedding (empty, too long, all zero, not finite)."""
    if not 0 < len(vector) <= MAX_DIMENSIONS:
        return None
    length = math.sqrt(math.fsum(x * x for x in vector))
    if not (math.isfinite(length) and length > 0):
        return None
    return struct.pack(f"<{len(vector)}{_HALF}", *(x / length for x in vector))


def unpacked(data: bytes) -> tuple[float, ...]:
    """A stored vector's parts (``packed``'s inverse, to half-float precision)."""
    return struct.unpack(f"<{len(data) // 2}{_HALF}", data[: len(data) // 2 * 2])
