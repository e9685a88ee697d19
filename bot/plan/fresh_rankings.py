"""Plan stage: a filter's ranking of a window no kept ranking spans (a new reader, a
filter changed, a pass earlier than the kept one), made from empty as a kept one is
made (``standings.made_from_empty``) and picked from with the one pick
(``bot.choose.standing_ranking``).  One a pass, never stored: the readers of a filter
whose windows start in this pass share the ranking of the widest of them.  Never
writes, renders or sends.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress

from sqlalchemy.orm import Session

from bot.choose.candidates import Candidate, Picked
from bot.choose.filters import uses_liked
from bot.choose.select import SelectionCache
from bot.choose.standing_ranking import Ordered, Standing, micros
from bot.choose.tagging import TagRules
from bot.domain import EntryView
from bot.plan.standings import made_from_empty


@dataclass
class FreshRankings:
    """One pass's rankings made from empty, and the picks made of them."""

    cache: SelectionCache
    rules: TagRules
    now: datetime
    count: int  # digest.max_entries
    views: dict[int, EntryView]  # the entries picks are made of, kept with the standing rankings'
    # Per filter, its ranking over the widest window asked for (and where that starts);
    # per (filter, window start), the part of it a pick reads, and its pick with nothing excluded.
    widest: dict[str, tuple[datetime | None, Standing]] = field(default_factory=dict)
    windows: dict[tuple[str, datetime | None], Ordered] = field(default_factory=dict)
    picks: dict[tuple[str, datetime | None], Picked] = field(default_factory=dict)

    def widen(self, session: Session, windows: Sequence[tuple[str, datetime | None]]) -> None:
        """Make each filter's ranking over the widest of *windows* (filter, start) first:
        the narrower ones of this pass are parts of it, not rankings of their own."""
        widest: dict[str, datetime | None] = {}
        for text, start in windows:
            if text not in widest:
                widest[text] = start
            elif (known := widest[text]) is not None:
                widest[text] = None if start is None else min(known, start)
        for text, start in widest.items():
            if not uses_liked(text):
                self._ranking(session, text, start)

    def pick(self, session: Session, text: str, start: datetime | None, exclude: Set[int]) -> Picked:
        """What a reader of filter *text* whose window starts at *start* gets, *exclude*
        (what they were sent) left out."""
        if not exclude and (known := self.picks.get((text, start))) is not None:
            return known  # readers who start together with nothing sent yet: one pick
        ordered = self.windows.get((text, start))
        if ordered is None:
            standing = self._ranking(session, text, start)
            since = -sys.maxsize if start is None else micros(start)
            keep = [seen >= since for seen in standing.seen]
            ordered = self.windows[(text, start)] = Ordered(
                list(compress(standing.ids, keep)), list(compress(standing.seen, keep))
            )
        raw = ordered.pick(None, exclude, self.count)
        absent = set(raw.chosen) - self.views.keys()
        if absent:  # the entries it was ranked from (not read again)
            first = self.widest[text][0]
            self.views.update((e.id, e) for e in self.cache.entries(session, first, self.now) if e.id in absent)
        chosen = [
            Candidate(self.views[i], explained)
            for i in raw.chosen
            if (explained := self.cache.verdict(text, self.views[i], self.rules)) is not None
        ]
        picked = Picked(chosen, raw.left, raw.oldest_left)
        if not exclude:
            self.picks[(text, start)] = picked
        return picked

    def _ranking(self, session: Session, text: str, start: datetime | None) -> Standing:
        known = self.widest.get(text)
        if known is not None and (known[0] is None or (start is not None and known[0] <= start)):
            return known[1]
        standing = made_from_empty(session, self.cache, self.rules, text, start, self.now)
        self.widest[text] = (start, standing)
        return standing
