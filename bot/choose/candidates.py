"""Select stage, the candidates: an entry a filter matched with its explanation, the
window a reader's digest looks at, the order candidates are ranked in and what a
digest picks from them.  Pure but for the zone database; never the store.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from functools import cached_property

from bot.choose.filter_terms import Expr
from bot.choose.matching import Explanation, FilterInput, explain
from bot.choose.standing_ranking import Ordered, micros, order_of, weight_of
from bot.choose.tagging import TagRules, nfkc
from bot.domain import EntryKind, EntryView, Subscriber, match_text
from bot.domain.identity import is_repo_name


@dataclass(frozen=True, slots=True)
class Candidate:
    entry: EntryView
    explanation: Explanation


def window_start(subscriber: Subscriber) -> datetime | None:
    """The oldest first-seen time this subscriber's backfill policy admits."""
    if subscriber.backfill == "all":
        return None
    days = int(subscriber.backfill.rstrip("d"))
    return subscriber.created_at - timedelta(days=days)


def effective_start(subscriber: Subscriber, start: datetime | None) -> datetime | None:
    """The later of their backfill window's start and *start* (None: no bound)."""
    window = window_start(subscriber)
    if start is not None and (window is None or start > window):
        return start
    return window


def local_send_time(subscriber: Subscriber, day: date) -> datetime:
    """*day* at the subscriber's send hour in their zone, as UTC (DST-correct)."""
    zone = zoneinfo.ZoneInfo(subscriber.timezone)
    return datetime.combine(day, time(subscriber.send_hour), tzinfo=zone).astimezone(UTC)


def doc_of(entry: EntryView) -> FilterInput:
    return FilterInput(
        tags=entry.tag_origins,
        title=nfkc(entry.content.title),
        summary=nfkc(match_text(entry.content.summary, entry.content.extra)),
        authors=authors_of(entry),
    )


def authors_of(entry: EntryView) -> tuple[str, ...]:
    """The names ``author:`` atoms look at: the entry's authors, and a repository's owner."""
    if entry.content.kind is EntryKind.REPO and entry.key.startswith("repo:"):
        owner_name = entry.content.title if is_repo_name(entry.content.title) else entry.key.removeprefix("repo:")
        owner = owner_name.partition("/")[0]
        if owner and owner.casefold() not in (a.casefold() for a in entry.content.authors):
            return (*entry.content.authors, owner)
    return entry.content.authors


def explain_entry(expr: Expr, entry: EntryView, rules: TagRules, liked: bool = False) -> Explanation:
    """``matching.explain`` with the fields where each rule tag's rule matched (*liked*:
    what ``liked`` atoms see)."""
    doc = replace(doc_of(entry), liked=liked)
    return explain(expr, doc, rules.match(doc.title, doc.summary) if len(rules) else {})


def _order(candidate: Candidate) -> tuple[int, int, int]:
    entry = candidate.entry
    return order_of(entry.id, micros(entry.first_seen_at), weight_of(candidate.explanation, entry.content.published))


class Ranked(list[Candidate]):
    """Candidates, best first, with what a pick reads of them (``Ordered``) worked out
    once per ranking (the subscribers of one filter and window share it)."""

    @cached_property
    def ordered(self) -> Ordered:
        return Ordered([c.entry.id for c in self], [micros(c.entry.first_seen_at) for c in self])

    @cached_property
    def by_id(self) -> dict[int, Candidate]:
        return {c.entry.id: c for c in self}


def rank(candidates: Iterable[Candidate]) -> Ranked:
    """*candidates* in the one ranking order (``standing_ranking.order_of``)."""
    return Ranked(sorted(candidates, key=_order))


@dataclass(frozen=True, slots=True)
class Picked:
    """What one subscriber gets of a ranking: the first *count* not excluded, how many
    are left over, and when the oldest of those was first seen (None: none left)."""

    chosen: list[Candidate]
    left: int
    oldest_left: datetime | None


def pick(ranked: list[Candidate], exclude: set[int] | frozenset[int], count: int) -> Picked:
    """The one pick (``standing_ranking.Ordered.pick``) of *ranked*, as candidates."""
    ranking = ranked if isinstance(ranked, Ranked) else Ranked(ranked)
    taken = ranking.ordered.pick(None, exclude, count)
    by_id = ranking.by_id
    return Picked([by_id[entry_id] for entry_id in taken.chosen], taken.left, taken.oldest_left)


def first_seen_order(entry: EntryView) -> tuple[datetime, int]:
    return entry.first_seen_at, entry.id
