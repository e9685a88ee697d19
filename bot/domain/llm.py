"""Domain types of the language-model stage (``bot.llm``): a TL;DR as stored and shown.
Small frozen dataclasses; never I/O, never the store."""

from __future__ import annotations

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
