"""Plan stage: a digest of a filter of several named interests ("Spiking hardware: snn;
Serving: llm and serving", ``bot.choose.filters.sections_of``) shows its entries in
sections.  The entries are chosen as for any filter (the interests' union, one
ranking, the same cache and watermark); ``Sectioner.place`` then puts each in its best
section (the interest it matches best, the first of those on a tie), names every
interest it matches in its why line, and orders the digest section by section;
``interest_of`` tells the ranking which interest's model judges a candidate.  Asks
an interest's verdict of the planning pass's cache (shared by every reader of it);
never reads the store or renders.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from bot.choose.candidates import Candidate
from bot.choose.filters import NamedInterest, sections_of
from bot.choose.matching import Explanation
from bot.choose.select import SelectionCache
from bot.choose.tagging import TagRules
from bot.store.ledger import Planned


class Sectioner:
    """Puts the entries chosen for readers of several interests in sections, each
    interest judging an entry as the planning pass's *cache* keeps it.  Readers of one
    filter who were chosen the same entries get the same result, made once (and so
    share one body)."""

    def __init__(self, cache: SelectionCache, rules: TagRules) -> None:
        self.cache, self.rules = cache, rules
        self.placed: dict[tuple[str, tuple[int, ...]], tuple[list[Candidate], list[Planned]]] = {}

    def place(
        self, filter_text: str, chosen: list[Candidate], entries: list[Planned], liked: frozenset[int] | None
    ) -> tuple[list[Candidate], list[Planned]]:
        """The *chosen* candidates and their planned *entries* (in step), section by
        section in the reader's order, each once, in their order within a section; as
        they are for a filter of one interest.  *liked*: the entries the reader's model
        likes (a filter naming ``liked`` judges by them, so its result is the reader's)."""
        sections = sections_of(filter_text)
        if not sections:
            return chosen, entries
        key = (filter_text, tuple(map(id, entries)))  # the pass's Planned objects, shared by a filter's readers
        if liked is None and key in self.placed:
            return self.placed[key]
        placed: list[tuple[int, int, Candidate, Planned]] = []
        for position, (candidate, planned) in enumerate(zip(chosen, entries, strict=True)):
            index, line = best_section(sections, self._verdicts(sections, candidate, liked), planned.why)
            placed.append((index, position, candidate, replace(planned, why=line, section=sections[index].name)))
        placed.sort(key=lambda item: (item[0], item[1]))
        found = [c for _, _, c, _ in placed], [p for _, _, _, p in placed]
        if liked is None:
            self.placed[key] = found
        return found

    def interest_of(self, filter_text: str, liked: frozenset[int] | None) -> Callable[[Candidate], str] | None:
        """The name of the interest ``place`` would put a candidate in, for ranking each
        by its interest's model before the digest's entries are chosen; None for a
        filter of one interest."""
        sections = sections_of(filter_text)
        if not sections:
            return None
        return lambda candidate: (
            sections[best_section(sections, self._verdicts(sections, candidate, liked), "")[0]].name
        )

    def _verdicts(
        self, sections: Sequence[NamedInterest], candidate: Candidate, liked: frozenset[int] | None
    ) -> list[Explanation | None]:
        entry = candidate.entry
        return [
            self.cache.verdict(s.text, entry, self.rules, liked is not None and entry.id in liked) for s in sections
        ]


def best_section(
    sections: Sequence[NamedInterest], verdicts: Sequence[Explanation | None], why: str
) -> tuple[int, str]:
    """The section an entry goes in (the highest score of the interests that match it,
    the first of them on a tie) and its why line: that interest's reasons, and the other
    interests it matches.  *why*: the line to keep when none matches (never, for an
    entry the union chose)."""
    matched = [(n, v) for n, v in enumerate(verdicts) if v is not None]
    if not matched:
        return 0, why
    index, found = max(matched, key=lambda pair: (pair[1].score, -pair[0]))
    others = [sections[n].name for n, _ in matched if n != index]
    line = f"{sections[index].name} · {found.why()}"
    return index, line + (f"; also in {', '.join(others)}" if others else "")
