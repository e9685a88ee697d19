"""Select stage: which stored entries a subscriber gets next, and why (the candidates,
their order and the pick in ``candidates``; filters' verdicts kept between passes in
``SelectionCache``).

    candidates = entries first seen in the subscriber's window (backfill before
                 they subscribed, everything since) and up to *as_of*
               - entries already sent to them (the diff)
               ∩ entries their filter matches (the filter)

ordered by relevance (``matching.explain``): higher score first, then more
matched atoms, then newer (published date, then first seen).  Reads the store,
never writes it, never renders or sends.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from bot.choose.candidates import Candidate, Ranked, doc_of, effective_start, explain_entry, first_seen_order, rank
from bot.choose.filter_terms import Atom, Expr, Liked, atoms, to_text
from bot.choose.filters import filter_fault, parse_filter, uses_liked
from bot.choose.matching import Explanation, FilterInput, explain, matches
from bot.choose.tagging import TagRules
from bot.domain import EntryView, Subscriber
from bot.store.entry_reads import entries_first_seen_between


class SelectionCache:
    """What one planning pass shares between subscribers: the entries up to one
    *as_of* (loaded once, from the earliest window start asked for), each
    filter's verdict on each entry, and each (filter, window start)'s ranking.

    The entries and rankings hold for one *as_of*: the next pass (a later one)
    loads the entries again.  The verdicts outlive the pass when the cache is kept
    (the daemon keeps one): a filter's verdict on an entry holds while the entry's
    text and tags and the tag rules are the same, so a pass weighs only the new and
    changed entries of windows that reach back weeks (readers with left-overs),
    not all of them again.  Verdicts on entries no window reaches are dropped."""

    RANKINGS = 1024  # (filter, start) pairs kept; a watermarked day needs one per filter
    EXPLANATIONS = 200_000  # distinct explanations shared before the table starts afresh

    def __init__(self) -> None:
        self.as_of: datetime | None = None
        self.loaded_from: datetime | None = None
        self.by_first_seen: list[EntryView] = []  # sorted by (first seen, id)
        self.filters: dict[str, Expr] = {}
        # Per filter, per entry id: the explanation of a match, None for no match.
        # Most entries match few filters, and a kept explanation of a miss was
        # most of the planner's memory.
        self.verdicts: dict[str, dict[int, Explanation | None]] = {}
        # Equal explanations held once: a filter explains most of its matches the
        # same way ("gpu: tag (rule: summary)"), and a pass holds tens of thousands.
        self.explanations: dict[Explanation, Explanation] = {}
        self.rankings: OrderedDict[tuple[str, datetime | None], Ranked] = OrderedDict()
        self.windows: OrderedDict[datetime | None, list[EntryView]] = OrderedDict()
        # Per filter, its ranking over the longest window asked for in this pass, and where that starts.
        self.widest: dict[str, tuple[datetime | None, Ranked]] = {}
        # Per entry, what every filter's verdict starts from: its text and where the tag rules hit.
        self.docs: dict[int, tuple[FilterInput, dict[str, tuple[str, ...]]]] = {}
        # Per entry with verdicts, the content they were made from (``_content``).
        self.weighed: dict[int, int] = {}
        self.rules: TagRules | None = None
        # Per entry with verdicts or a doc, when it was first seen (``forget_before``).
        self.seen_at: dict[int, datetime] = {}
        # What the plan stage keeps between passes besides verdicts (``bot.plan.standings``).
        self.planning: object = None

    def entries(self, session: Session, start: datetime | None, as_of: datetime) -> list[EntryView]:
        """Entries first seen in [start, as_of], in id order."""
        if self.as_of != as_of or not self._covers(start):
            self.by_first_seen = sorted(entries_first_seen_between(session, start, as_of), key=first_seen_order)
            self._forget_stale(self.by_first_seen)
            self.as_of, self.loaded_from = as_of, start
            self.rankings.clear()
            self.widest.clear()
            self.windows.clear()
        if start in self.windows:
            self.windows.move_to_end(start)
            return self.windows[start]
        at = 0 if start is None else bisect_left(self.by_first_seen, start, key=lambda e: e.first_seen_at)
        window = self.windows[start] = sorted(self.by_first_seen[at:], key=lambda e: e.id)
        if len(self.windows) > 64:  # subscribers without a watermark each have their own start
            self.windows.popitem(last=False)
        return window

    def _forget_stale(self, loaded: list[EntryView]) -> None:
        """Drop the verdicts on entries that changed since they were weighed, or that
        no window loaded now reaches."""
        now = {entry.id: _content(entry) for entry in loaded}
        stale = [entry_id for entry_id, content in self.weighed.items() if now.get(entry_id) != content]
        for entry_id in stale:
            del self.weighed[entry_id]
            self.docs.pop(entry_id, None)
            for verdicts in self.verdicts.values():
                verdicts.pop(entry_id, None)
        if len(self.explanations) > self.EXPLANATIONS:
            self.explanations.clear()
        self.weighed.update((entry_id, content) for entry_id, content in now.items() if entry_id not in self.weighed)

    def refresh(self, entries: Iterable[EntryView]) -> None:
        """Forget the verdicts on those of *entries* that changed since they were weighed
        (entries read one by one, not through ``entries``)."""
        for entry in entries:
            content = _content(entry)
            if self.weighed.get(entry.id) != content:
                self.docs.pop(entry.id, None)
                for verdicts in self.verdicts.values():
                    verdicts.pop(entry.id, None)
                self.weighed[entry.id] = content
                self.seen_at[entry.id] = entry.first_seen_at

    def forget_before(self, moment: datetime) -> None:
        """Forget the verdicts on entries first seen before *moment*: a daemon that plans
        from kept rankings weighs only new entries, and would otherwise keep a verdict
        per filter on every entry it ever saw."""
        old = [entry_id for entry_id, seen in self.seen_at.items() if seen < moment]
        if not old:
            return
        for entry_id in old:
            del self.seen_at[entry_id]
            self.weighed.pop(entry_id, None)
            self.docs.pop(entry_id, None)
        for verdicts in self.verdicts.values():
            for entry_id in old:
                verdicts.pop(entry_id, None)

    def _same_rules(self, rules: TagRules) -> None:
        """Verdicts made with other tag rules are forgotten."""
        if rules is self.rules:
            return
        if self.rules is None or rules.fingerprint != self.rules.fingerprint:
            self.verdicts.clear()
            self.docs.clear()
            self.explanations.clear()
            self.rankings.clear()
            self.widest.clear()
        self.rules = rules

    def _covers(self, start: datetime | None) -> bool:
        if self.loaded_from is None:
            return self.as_of is not None
        return start is not None and start >= self.loaded_from

    def verdict(self, filter_text: str, entry: EntryView, rules: TagRules, liked: bool = False) -> Explanation | None:
        """Why the filter matches the entry, or None when it does not; *liked*: the
        subscriber's model scores the entry above their threshold (``liked`` atoms)."""
        self._same_rules(rules)
        name = f"{filter_text}\x00liked" if liked else filter_text  # either verdict is shared by every subscriber
        if name not in self.verdicts:
            self.filters[name] = parse_filter(filter_text)
            self.verdicts[name] = {}
        verdicts = self.verdicts[name]
        if entry.id not in verdicts:
            if entry.id not in self.docs:
                self.seen_at[entry.id] = entry.first_seen_at
                doc = doc_of(entry)
                self.docs[entry.id] = doc, rules.match(doc.title, doc.summary) if len(rules) else {}
            expr, (doc, rule_fields) = self.filters[name], self.docs[entry.id]
            if liked:
                doc = replace(doc, liked=True)
            if matches(expr, doc):
                explanation = explain(expr, doc, rule_fields, matched=True)
                verdicts[entry.id] = self.explanations.setdefault(explanation, explanation)
            else:
                verdicts[entry.id] = None
        return verdicts[entry.id]

    def ranked(
        self,
        session: Session,
        filter_text: str,
        start: datetime | None,
        as_of: datetime,
        rules: TagRules,
        liked: frozenset[int] | None = None,
    ) -> list[Candidate]:
        """Every entry of the window [start, as_of] the filter matches, best first.
        *liked*: the entries one subscriber's model likes, for a filter with ``liked``
        (that ranking is theirs alone, so it is not kept)."""
        if liked is not None and uses_liked(filter_text):
            window = self.entries(session, start, as_of)
            return rank(
                Candidate(e, x) for e in window if (x := self.verdict(filter_text, e, rules, e.id in liked)) is not None
            )
        key = (filter_text, start)
        if self.as_of == as_of and self._covers(start) and key in self.rankings:
            self.rankings.move_to_end(key)
            return self.rankings[key]
        window = self.entries(session, start, as_of)
        self._same_rules(rules)
        found = self._part_of_wider(filter_text, start)
        if found is None:
            known = self.verdicts.get(filter_text, {})
            found = rank(
                Candidate(e, x)
                for e in window
                if (x := known[e.id] if e.id in known else self.verdict(filter_text, e, rules)) is not None
            )
            self.widest[filter_text] = (start, found)
        self.rankings[key] = found
        if len(self.rankings) > self.RANKINGS:
            self.rankings.popitem(last=False)
        return found

    def _part_of_wider(self, filter_text: str, start: datetime | None) -> Ranked | None:
        """The filter's ranking of a window starting at *start*, taken from its ranking of
        a longer window of this pass (same order: the part first seen since *start*)."""
        wider = self.widest.get(filter_text)
        if wider is None or not (wider[0] is None or (start is not None and wider[0] <= start)):
            return None
        return Ranked(c for c in wider[1] if start is None or c.entry.first_seen_at >= start)


def _content(entry: EntryView) -> int:
    """What a filter's verdict on the entry depends on (``doc_of``), hashed."""
    origins = tuple(sorted((tag, tuple(sorted(how))) for tag, how in entry.tag_origins.items()))
    content = entry.content
    return hash((content.title, content.summary, content.authors, origins, content.extra))


def select_for(
    session: Session,
    subscriber: Subscriber,
    rules: TagRules,
    *,
    as_of: datetime,
    exclude: set[int] | frozenset[int] = frozenset(),
    cache: SelectionCache | None = None,
    start: datetime | None = None,
    liked: frozenset[int] | None = None,
) -> list[Candidate]:
    """The entries *subscriber* would get at *as_of*, best first.  *exclude*
    holds entry ids already sent to them.  *start* narrows their window (the
    planner's watermark); the default is the window their backfill gives.
    *liked*: the entries their model likes (``liked`` atoms match nothing without it)."""
    cache = cache or SelectionCache()
    ranked = cache.ranked(session, subscriber.filter, effective_start(subscriber, start), as_of, rules, liked)
    return [c for c in ranked if c.entry.id not in exclude] if exclude else list(ranked)


def taken_by(filters: Iterable[str], entries: Sequence[EntryView]) -> dict[str, list[int]]:
    """Which of *entries* each filter takes, by the match the planner's verdicts make
    (``matches`` on ``doc_of``; ``liked`` atoms, which need a reader's own model, match
    nothing); a filter the planner leaves out (``filter_fault``: a restored row that
    does not parse) takes none."""
    docs = [(entry.id, doc_of(entry)) for entry in entries]
    taken: dict[str, list[int]] = {}
    for text in filters:
        if text in taken:
            continue
        expr = parse_filter(text) if filter_fault(text) is None else None
        taken[text] = [entry_id for entry_id, doc in docs if expr is not None and matches(expr, doc)]
    return taken


def every_entry(session: Session) -> list[EntryView]:
    return entries_first_seen_between(session, None, datetime.max.replace(tzinfo=UTC))


def matching(
    session: Session,
    expr: Expr,
    rules: TagRules,
    *,
    limit: int | None = None,
    entries: list[EntryView] | None = None,
    liked: frozenset[int] = frozenset(),
) -> tuple[list[Candidate], list[Atom]]:
    """Every stored entry *expr* matches, best first, and the tags and phrases of *expr*
    that no stored entry matches on its own (the part of a filter that cannot be doing
    anything), from one read of the store (for ``tags test``; *entries*: that read,
    when the caller made it; *liked*: what ``liked`` atoms match)."""
    entries = every_entry(session) if entries is None else entries
    found = [Candidate(e, x) for e in entries if (x := explain_entry(expr, e, rules, e.id in liked)).matched]
    ranked = rank(found)
    alone = sorted((a for a in atoms(expr) if a != Liked()), key=to_text)  # a model's, not the store's
    idle = [atom for atom in alone if not any(explain_entry(atom, e, rules).matched for e in entries)]
    return (ranked[:limit] if limit is not None else ranked), idle
