"""Plan stage: what each due reader of one batch gets, and the pass it is chosen in.

A reader's entries come from their filter's standing ranking when it serves them
(``bot.plan.standings``), else from a ranking of their own window, reordered by their
model when they have one; a scheduled day already empty and still open is filled.
The batch is written by ``bot.plan.writes``.  Never writes, renders or sends.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.candidates import Candidate, Picked, effective_start, local_send_time, pick
from bot.choose.filters import uses_liked
from bot.choose.select import SelectionCache
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.domain import DigestKind, DigestState, Subscriber
from bot.domain.links import primary_url
from bot.plan.cadence import mails
from bot.plan.days import DayStep, closes_at, day_step, waits_for_dump
from bot.plan.fresh_rankings import FreshRankings
from bot.plan.report import PlanReport
from bot.plan.retention import kept_since
from bot.plan.sections import Sectioner
from bot.plan.standings import Standings
from bot.plan.windows import claimed_in_windows, watermark, window_starts
from bot.plan.writes import Batch
from bot.store.ledger import NewDigest, Planned, last_scheduled_at, scheduled_days

if TYPE_CHECKING:
    from bot.plan.challenger import Challenger
    from bot.taste.model import Model
    from bot.taste.ranking import ReaderTaste, TastePass


@dataclass
class PlanningPass:
    """One planning pass: its inputs, caches and report."""

    factory: sessionmaker[Session]
    settings: Settings
    rules: TagRules
    now: datetime
    kind: DigestKind
    all_due: bool
    latest_entry_at: datetime | None  # the newest entry's first_seen_at
    latest_dump_at: datetime | None  # when the newest source with new entries was ingested
    cache: SelectionCache = field(default_factory=SelectionCache)
    memo: dict[tuple[int, int], Planned] = field(default_factory=dict)
    # Per shared pick (by id, with the pick itself kept so the id stays its own): its items.
    planned: dict[int, tuple[Picked, list[Candidate], list[Planned], datetime]] = field(default_factory=dict)
    report: PlanReport = field(default_factory=PlanReport)
    taste: TastePass | None = None  # the subscribers' models, when any has one
    challenger: Challenger | None = None  # an outside ranker, when one is configured
    standings: Standings = field(init=False)
    fresh: FreshRankings = field(init=False)

    def __post_init__(self) -> None:
        digest = self.settings.digest
        self.standings = Standings(self.cache, self.rules, self.now, digest.max_age_days, digest.max_entries)
        self.fresh = FreshRankings(self.cache, self.rules, self.now, digest.max_entries, self.standings.memory.views)


def planned_key(subscriber: Subscriber, rules: TagRules) -> str:
    """What a watermark is valid for: the subscriber's filter and backfill and the tag rules."""
    return _planned_key(subscriber.filter, subscriber.backfill, rules.fingerprint)


@lru_cache(maxsize=4096)  # subscribers share a few hundred filters
def _planned_key(filter_text: str, backfill: str, rules_fingerprint: str) -> str:
    text = f"{filter_text}\x00{backfill}\x00{rules_fingerprint}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def choose_batch(session: Session, run: PlanningPass, due: list[tuple[Subscriber, date]]) -> Batch:
    """What each due subscriber of the batch gets: from their filter's standing ranking
    when it serves them (``bot.plan.standings``), else from a ranking of their window."""
    now, settings = run.now, run.settings
    fills: dict[int, int] = {}
    if run.kind is DigestKind.SCHEDULED:
        due, fills = _days_to_plan(session, run, due)
    keys = {s.id: planned_key(s, run.rules) for s, _ in due}
    oldest = now - timedelta(days=settings.digest.max_age_days)
    starts, marked = window_starts(session, due, keys, oldest, kept_since(settings, now))
    models = _models(session, run, due)
    fast, claimed = _rankings_ready(session, run, due, starts, models)
    batch = Batch()
    sectioner = Sectioner(run.cache, run.rules)
    for subscriber, day in due:
        taste: ReaderTaste | None = None
        liked: frozenset[int] | None = None
        picked = fast.get(subscriber.id)
        if picked is None:
            taste = _reader_taste(session, run, subscriber, starts[subscriber.id], models.get(subscriber.id))
            liked = _liked(subscriber, taste)
            exclude: set[int] | frozenset[int] = claimed.get(subscriber.id, frozenset())
            picked = _long_way(session, run, sectioner, subscriber, starts[subscriber.id], exclude, taste, liked)
        _mark(batch, subscriber.id, (watermark(picked.oldest_left, now, oldest), keys[subscriber.id]), marked)
        state = digest_state(
            len(picked.chosen), send_empty=settings.digest.send_empty, kind=run.kind, mailed=mails(subscriber.cadence)
        )
        fill = fills.get(subscriber.id)
        if state is None or (state is DigestState.EMPTY and fill is not None):
            if fill is not None:
                batch.still_empty.append(fill)
            run.report.empty += 1
            continue
        chosen, entries, first_seen = _planned_of(run, picked, shared=subscriber.id in fast)
        batch.oldest.append(first_seen)
        chosen, entries = sectioner.place(subscriber.filter, chosen, entries, liked)
        if taste is not None:
            entries = taste.planned(chosen, entries)
        language = settings.llm.tldr_language(subscriber.language)
        batch.choices.append(
            NewDigest(
                subscriber.id, day, run.kind, state, entries, picked.left, fill, subscriber.filter, language=language
            )
        )
    return batch


def _rankings_ready(
    session: Session,
    run: PlanningPass,
    due: list[tuple[Subscriber, date]],
    starts: dict[int, datetime],
    models: dict[int, Model],
) -> tuple[dict[int, Picked], dict[int, set[int]]]:
    """The picks the kept rankings make for the readers they serve; for the others,
    what they were sent in their windows, with their rankings made (from empty, or
    their own to be reordered by their model)."""
    shared = [(s.id, s.filter, effective_start(s, starts[s.id])) for s, _ in due if s.id not in models]
    run.standings.prepare(session, [text for _, text, _ in shared])
    fast = run.standings.choose(session, shared)
    slow = [(s, d) for s, d in due if s.id not in fast]
    claimed = claimed_in_windows(session, slow, starts, run.cache, run.now)
    _rank_widest_first(session, run, [(s, d) for s, d in slow if s.id in models], starts)
    run.fresh.widen(session, [(s.filter, effective_start(s, starts[s.id])) for s, _ in slow if s.id not in models])
    return fast, claimed


def _mark(
    batch: Batch, subscriber_id: int, mark: tuple[datetime, str], marked: dict[int, tuple[datetime, str]]
) -> None:
    """Set the reader's watermark to *mark*, unless it is *marked* so already: a reader
    whose left-overs wait as they did keeps their row as it is."""
    if marked.get(subscriber_id) != mark:
        batch.marks.append((subscriber_id, *mark))


def _planned_of(run: PlanningPass, picked: Picked, *, shared: bool) -> tuple[list[Candidate], list[Planned], datetime]:
    """The body items of what was *picked*, and when the oldest of them was first seen;
    made once for the readers who share a pick (*shared*: a standing ranking's, the
    same object for every reader of one filter with the same history)."""
    if shared and (known := run.planned.get(id(picked))) is not None and known[0] is picked:
        return known[1], known[2], known[3]
    entries = [_planned_entry(c, run.settings, run.memo) for c in picked.chosen]
    first_seen = min((c.entry.first_seen_at for c in picked.chosen), default=run.now)
    if shared:
        run.planned[id(picked)] = (picked, picked.chosen, entries, first_seen)
    return picked.chosen, entries, first_seen


def _long_way(
    session: Session,
    run: PlanningPass,
    sectioner: Sectioner,
    subscriber: Subscriber,
    start: datetime | None,
    exclude: set[int] | frozenset[int],
    taste: ReaderTaste | None,
    liked: frozenset[int] | None,
) -> Picked:
    """What a reader gets from a ranking of their whole window: one that no kept ranking
    spans, made from empty as a kept one is (``bot.plan.fresh_rankings``), or theirs alone
    (their model reorders it, or their filter names ``liked``)."""
    window_start = effective_start(subscriber, start)
    if taste is None and liked is None:
        return run.fresh.pick(session, subscriber.filter, window_start, exclude)
    ranked = run.cache.ranked(session, subscriber.filter, window_start, run.now, run.rules, liked)
    if taste is not None:
        placing = sectioner.interest_of(subscriber.filter, liked)
        ranked = taste.rerank([c for c in ranked if c.entry.id not in exclude], placing)
    return pick(ranked, exclude, run.settings.digest.max_entries)


def _rank_widest_first(
    session: Session, run: PlanningPass, due: list[tuple[Subscriber, date]], starts: dict[int, datetime]
) -> None:
    """Rank each filter over the longest window its subscribers need first: the others
    are parts of it (``SelectionCache.ranked``), not rankings of their own."""
    widest: dict[str, datetime | None] = {}
    for subscriber, _ in due:
        start = effective_start(subscriber, starts[subscriber.id])
        if subscriber.filter not in widest:
            widest[subscriber.filter] = start
        elif (known := widest[subscriber.filter]) is not None:
            widest[subscriber.filter] = None if start is None else min(known, start)
    for text, start in widest.items():
        if not uses_liked(text):
            run.cache.ranked(session, text, start, run.now, run.rules)


def _models(session: Session, run: PlanningPass, due: list[tuple[Subscriber, date]]) -> dict[int, Model]:
    return run.taste.models(session, [s.id for s, _ in due]) if run.taste is not None else {}


def _reader_taste(
    session: Session, run: PlanningPass, subscriber: Subscriber, start: datetime | None, model: Model | None
) -> ReaderTaste | None:
    """What the subscriber's model says of their window (``bot.taste.ranking``); None without one."""
    if model is None or run.taste is None:
        return None
    window_start = effective_start(subscriber, start)
    return run.taste.reader(model, window_start, run.cache.entries(session, window_start, run.now), subscriber.id)


def _liked(subscriber: Subscriber, taste: ReaderTaste | None) -> frozenset[int] | None:
    """The entries ``liked`` matches for a filter that names it (none without a model)."""
    if not uses_liked(subscriber.filter):
        return None
    return taste.liked(subscriber.taste_threshold) if taste is not None else frozenset()


def _days_to_plan(
    session: Session, run: PlanningPass, due: list[tuple[Subscriber, date]]
) -> tuple[list[tuple[Subscriber, date]], dict[int, int]]:
    """The due subscribers whose day is planned now, and, per subscriber whose day is
    empty and open, the empty digest that a digest planned now fills."""
    ids = [s.id for s, _ in due]
    records = scheduled_days(session, ids, {d for _, d in due})
    wait = timedelta(minutes=run.settings.schedule.wait_for_dump_minutes)
    last = last_scheduled_at(session, ids, max(d for _, d in due)) if wait and not run.all_due else {}
    close_hour = run.settings.schedule.day_closes_hour
    planned: list[tuple[Subscriber, date]] = []
    fills: dict[int, int] = {}
    for subscriber, day in due:
        record = records.get((subscriber.id, day))
        closes = closes_at(day, send_hour=subscriber.send_hour, close_hour=close_hour, timezone=subscriber.timezone)
        step = day_step(record, now=run.now, closes_at=closes, latest_entry_at=run.latest_entry_at)
        if step is DayStep.SKIP:
            continue
        if record is not None:
            fills[subscriber.id] = record.digest_id
        elif waits_for_dump(
            now=run.now,
            send_at=local_send_time(subscriber, day),
            wait=wait,
            last_digest_at=last.get(subscriber.id),
            latest_dump_at=run.latest_dump_at,
        ):
            run.report.waiting += 1
            continue
        planned.append((subscriber, day))
    return planned, fills


def digest_state(entries: int, *, send_empty: bool, kind: DigestKind, mailed: bool = True) -> DigestState | None:
    """What a due subscriber's digest is: queued when it has entries (or empty ones are
    sent), an ``empty`` record for a scheduled day with nothing (so the planner does
    not look again every minute), or none at all for a manual one with nothing.  A
    digest that is not *mailed* (cadence ``feed``) is sent once planned: it is in the
    reader's feed from then on, and what it carries is theirs like any sent digest's."""
    if entries:
        return DigestState.QUEUED if mailed else DigestState.SENT
    if send_empty and mailed:
        return DigestState.QUEUED
    return DigestState.EMPTY if kind is DigestKind.SCHEDULED else None


def _planned_entry(candidate: Candidate, settings: Settings, memo: dict[tuple[int, int], Planned]) -> Planned:
    """A body item's content; the same for every subscriber of one filter, so made once a pass."""
    key = (id(candidate.explanation), candidate.entry.id)  # explanations live as long as the pass's cache
    if key not in memo:
        entry = candidate.entry
        memo[key] = Planned(
            entry.id,
            entry.summary_source_id,
            candidate.explanation.why(),
            entry.tags,
            primary_url(entry.content, settings.digest.search_url),
        )
    return memo[key]
