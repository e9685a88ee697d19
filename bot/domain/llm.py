"""Domain types of the language-model stage (``bot.llm``): a TL;DR as stored and shown,
and an embedding as stored.  Small frozen dataclasses and pure functions; never I/O,
never the store."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

# A BCP 47 tag as operators write them: a language, then script, region or variant subtags.
LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,3}(?:-[A-Za-z0-9]{2,8})*")
# A model's name as the servers take it ("llama3.1:8b", "Qwen/Qwen2.5-7B-Instruct").
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")


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
# The stored formats, spelled here only: a vector's parts are little-endian half floats
# (a unit vector's parts are within [-1, 1], where 11 bits of precision rank as well as
# 24, at half the bytes); a reader's model's weights little-endian single floats.  As
# numpy names them, and the vector's as struct does.
VECTOR_DTYPE = "<f2"
WEIGHTS_DTYPE = "<f4"
_HALF = "e"


def packed(vector: Sequence[float]) -> bytes | None:
    """*vector* scaled to unit length, as stored (``embeddings.vector``): little-endian
    half floats; None for what is no embedding (empty, too long, all zero, not finite)."""
    if not 0 < len(vector) <= MAX_DIMENSIONS or not all(math.isfinite(x) for x in vector):
        return None
    # Scaled by its largest part first: squares of parts near 1e154 overflow a float.
    largest = max(abs(x) for x in vector)
    if largest == 0:
        return None
    scaled = [x / largest for x in vector]
    length = math.sqrt(math.fsum(x * x for x in scaled))
    return struct.pack(f"<{len(vector)}{_HALF}", *(x / length for x in scaled))


def unpacked(data: bytes) -> tuple[float, ...]:
    """A stored vector's parts (``packed``'s inverse, to half-float precision)."""
    return struct.unpack(f"<{len(data) // 2}{_HALF}", data[: len(data) // 2 * 2])
