"""Language-model stage, rules: which (entry, language) TL;DRs to ask for, most read
first.  Pure: never sends a request, never reads the store."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bot.choose.filters import FilterError, parse_filter
from bot.choose.matching import Doc, matches
from bot.domain.llm import chosen_language


@dataclass(frozen=True, slots=True)
class WantedTldr:
    entry_id: int
    language: str
    readers: int  # active readers of that language whose filter takes the entry


def wanted_tldrs(
    docs: Sequence[tuple[int, Doc]], readers: Sequence[tuple[str, str, int]], *, offered: Sequence[str]
) -> list[WantedTldr]:
    """Each (entry, language) some reader will get, by how many readers will get it, then
    newest entry first.  *readers* are (filter, language, how many) as the store groups
    them; a language no longer offered counts as the first offered; a filter that no
    longer parses (a restored row) counts for nobody, as the planner gives them nothing."""
    groups: Counter[tuple[str, str]] = Counter()
    for text, language, count in readers:
        groups[(text, chosen_language(language, offered))] += count
    parsed = []
    for (text, language), count in groups.items():
        try:
            parsed.append((parse_filter(text), language, count))
        except FilterError:
            continue
    counted: Counter[tuple[int, str]] = Counter()
    for entry_id, doc in docs:
        for expr, language, count in parsed:
            if matches(expr, doc):
                counted[(entry_id, language)] += count
    ordered = sorted(counted.items(), key=lambda item: (-item[1], -item[0][0], item[0][1]))
    return [WantedTldr(entry_id, language, count) for (entry_id, language), count in ordered]
