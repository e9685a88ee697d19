"""Select stage: which stored entries a subscriber gets next, and why.

    candidates = entries first seen in the subscriber's window (backfill before
                 they subscribed, everything since) and up to *as_of*
               - entries already sent to them (the diff)
               ∩ entries their filter matches (the filter)

ordered by relevance (``filters.explain``): higher score first, then more
matched atoms, then newer (published date, then first seen).  Reads the store,
never writes it, never renders or sends.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy.orm import Session

from bot.domain import EntryView, Subscriber, match_text
from bot.filters import Doc, Explanation, Expr, explain, parse_filter
from bot.store.entries import entries_first_seen_between
from bot.tagging import TagRules, nfkc


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


def local_send_time(subscriber: Subscriber, day: date) -> datetime:
    """*day* at the subscriber's send hour in their zone, as UTC (DST-correct)."""
    zone = zoneinfo.ZoneInfo(subscriber.timezone)
    return datetime.combine(day, time(subscriber.send_hour), tzinfo=zone).astimezone(UTC)


def doc_of(entry: EntryView) -> Doc:
    return Doc(tags=entry.tag_origins, title=nfkc(entry.title), summary=nfkc(match_text(entry.summary, entry.extra)))


def explain_entry(expr: Expr, entry: EntryView, rules: TagRules) -> Explanation:
    """``filters.explain`` with the fields where each rule tag's rule matched."""
    doc = doc_of(entry)
    return explain(expr, doc, rules.match(doc.title, doc.summary) if len(rules) else {})


def _order_key(candidate: Candidate) -> tuple[int, int, int, float]:
    entry = candidate.entry
    published = entry.published.toordinal() if entry.published else 0
    return (
        -candidate.explanation.score,
        -len(candidate.explanation.hits),
        -published,
        -entry.first_seen_at.timestamp(),
    )


def rank(candidates: Iterable[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=_order_key)


class SelectionCache:
    """What one planning pass can share between subscribers: the entries of a
    window (subscribers imported together share their window start) and each
    filter's verdict on each entry.  Valid for one *as_of* and one pass only:
    entries ingested meanwhile are picked up by the next pass."""

    def __init__(self) -> None:
        self.windows: dict[tuple[datetime | None, datetime], list[EntryView]] = {}
        self.filters: dict[str, Expr] = {}
        self.verdicts: dict[tuple[str, int], Explanation] = {}

    def entries(self, session: Session, start: datetime | None, as_of: datetime) -> list[EntryView]:
        key = (start, as_of)
        if key not in self.windows:
            self.windows[key] = entries_first_seen_between(session, start, as_of)
        return self.windows[key]

    def explain(self, filter_text: str, entry: EntryView, rules: TagRules) -> Explanation:
        key = (filter_text, entry.id)
        if key not in self.verdicts:
            if filter_text not in self.filters:
                self.filters[filter_text] = parse_filter(filter_text)
            self.verdicts[key] = explain_entry(self.filters[filter_text], entry, rules)
        return self.verdicts[key]


def select_for(
    session: Session,
    subscriber: Subscriber,
    rules: TagRules,
    *,
    as_of: datetime,
    exclude: set[int] | frozenset[int] = frozenset(),
    cache: SelectionCache | None = None,
) -> list[Candidate]:
    """The entries *subscriber* would get at *as_of*, best first.  *exclude*
    holds entry ids already sent to them."""
    cache = cache or SelectionCache()
    chosen = []
    for entry in cache.entries(session, window_start(subscriber), as_of):
        if entry.id in exclude:
            continue
        explanation = cache.explain(subscriber.filter, entry, rules)
        if explanation.matched:
            chosen.append(Candidate(entry, explanation))
    return rank(chosen)


def matching(session: Session, expr: Expr, rules: TagRules, *, limit: int | None = None) -> list[Candidate]:
    """Every stored entry *expr* matches, best first (for ``tags test``)."""
    entries = entries_first_seen_between(session, None, datetime.max.replace(tzinfo=UTC))
    found = [Candidate(e, x) for e in entries if (x := explain_entry(expr, e, rules)).matched]
    ranked = rank(found)
    return ranked[:limit] if limit is not None else ranked
