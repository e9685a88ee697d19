"""Language-model stage, rules: which (entry, language) TL;DRs to ask for, most read
first.  Who gets which entry is the choosing stage's to say (``choose.select.taken_by``);
this only counts.  Pure: never sends a request, never reads the store."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.domain.llm import chosen_language


@dataclass(frozen=True, slots=True)
class WantedTldr:
    entry_id: int
    language: str
    readers: int  # active readers of that language whose filter takes the entry


def wanted_tldrs(
    taken: Mapping[str, Sequence[int]], readers: Sequence[tuple[str, str, int]], *, offered: Sequence[str]
) -> list[WantedTldr]:
    """Each (entry, language) some reader will get, by how many readers will get it, then
    newest entry first.  *taken*: which entries each filter takes; *readers* are (filter,
    language, how many) as the store groups them; a language no longer offered counts as
    the first offered."""
    counted: Counter[tuple[int, str]] = Counter()
    for text, language, count in readers:
        for entry_id in taken.get(text, ()):
            counted[(entry_id, chosen_language(language, offered))] += count
    ordered = sorted(counted.items(), key=lambda item: (-item[1], -item[0][0], item[0][1]))
    return [WantedTldr(entry_id, language, count) for (entry_id, language), count in ordered]
