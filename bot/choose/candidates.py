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
from bot.choose.matching import Doc, Explanation, explain
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


def doc_of(entry: EntryView) -> Doc:
    return Doc(
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


def _order_key(candidate: Candidate) -> tuple[int, int, int, float]:
    entry = candidate.entry
    published = entry.content.published.toordinal() if entry.content.published else 0
    return (
        -candidate.explanation.score,
        -len(candidate.explanation.hits),
        -published,
        -entry.first_seen_at.timestamp(),
    )


class Ranked(list[Candidate]):
    """Candidates, best first, with what ``pick`` needs of them, worked out once per
    ranking (the subscribers of one filter and window share it)."""

    @cached_property
    def ids(self) -> frozenset[int]:
        return frozenset(c.entry.id for c in self)

    @cached_property
    def by_first_seen(self) -> list[Candidate]:
        return sorted(self, key=lambda c: first_seen_order(c.entry))


def rank(candidates: Iterable[Candidate]) -> Ranked:
    return Ranked(sorted(candidates, key=_order_key))


@dataclass(frozen=True, slots=True)
class Picked:
    """What one subscriber gets of a ranking: the first *count* not excluded, how many
    are left over, and when the oldest of those was first seen (None: none left)."""

    chosen: list[Candidate]
    left: int
    oldest_left: datetime | None


def pick(ranked: list[Candidate], exclude: set[int] | frozenset[int], count: int) -> Picked:
    """The best *count* of *ranked* not in *exclude*, and what is left.  Reads as many
    candidates as it takes plus the excluded ones, not the whole ranking: a reader with
    weeks of left-overs has thousands (``Ranked``)."""
    ranking = ranked if isinstance(ranked, Ranked) else Ranked(ranked)
    chosen: list[Candidate] = []
    for candidate in ranking:
        if len(chosen) == count:
            break
        if candidate.entry.id not in exclude:
            chosen.append(candidate)
    excluded = sum(1 for entry_id in exclude if entry_id in ranking.ids) if exclude else 0
    left = len(ranking) - excluded - len(chosen)
    oldest = None
    if left:
        taken = {c.entry.id for c in chosen}
        oldest = next(
            c.entry.first_seen_at
            for c in ranking.by_first_seen
            if c.entry.id not in exclude and c.entry.id not in taken
        )
    return Picked(chosen, left, oldest)


def first_seen_order(entry: EntryView) -> tuple[datetime, int]:
    return entry.first_seen_at, entry.id
