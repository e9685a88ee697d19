"""Plan stage: each filter's standing ranking, brought up to date once a pass, and what
a reader gets of it.

A reader with a month of left-overs would cost a month: every entry of their window
weighed by their filter, read with its tags, and what they were sent of it read entry
by entry.  Instead a filter's matches over the days its readers' windows reach (at most
``digest.max_age_days`` and a day) are kept in ``filter_rankings``
(``bot.choose.standing_ranking``): a pass weighs only the entries first
seen or listed again since the ranking was made, and readers whose digests share the
same bodies (the readers of one filter planned on the same days) share what they were
sent and what they get.  A reader whose window starts before the kept ranking's span
(new, their filter changed) gets the same filter's ranking of their window made from
empty (``bot.plan.fresh_rankings``: as a kept one is made, not kept), so every reader of a filter is
planned one way: one order and one pick (``bot.choose.standing_ranking``), a ranking
kept or made afresh; ``tests/test_standing.py`` plans a seeded month both ways, digest
for digest.  Only a reader whose ranking is their own (a model reorders it, a filter
names ``liked``) is ranked by the taste stage (``bot.plan.batch_choice``).  Never
renders, never sends; writes only rankings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.candidates import Candidate, Picked
from bot.choose.filters import uses_liked
from bot.choose.select import SelectionCache
from bot.choose.standing_ranking import Match, Standing, StandingPick, micros
from bot.choose.tagging import TagRules
from bot.domain import EntryView
from bot.plan.windows import WATERMARK_MARGIN
from bot.store.engine import transaction
from bot.store.entry_reads import entries_by_ids, entries_seen_or_touched_since
from bot.store.facts import RETAGGED_AT, fact
from bot.store.rankings import StoredRanking, ranking_bodies, ranking_stamps, store_rankings
from bot.store.sent import body_groups_since, read_bodies
from bot.store.subscribers import earliest_watermarks


def ranking_key(filter_text: str, rules: TagRules) -> str:
    """What a stored ranking is valid for: the filter and the tag rules."""
    text = f"{filter_text}\x00{rules.fingerprint}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def span_start(now: datetime, max_age_days: int) -> datetime:
    """The earliest a pass at *now* starts a ranking: a day before the oldest entry a
    left-over window may reach, at midnight UTC, so a span moves once a day."""
    day = (now - timedelta(days=max_age_days + 1)).astimezone(UTC).date()
    return datetime.combine(day, time(), tzinfo=UTC)


@dataclass
class _Ready:
    standing: Standing
    covers_from: datetime


@dataclass
class StandingMemory:
    """What a planning process keeps from one pass to the next (the daemon keeps it with
    its ``SelectionCache``): bodies read (a body key names its content, so what it holds
    never changes), entries read (made current at each pass's start from what sources
    listed since the last one, all forgotten when rule tags were made again), and
    rankings as stored (used while the store's is the same one).  Each part is emptied
    when it holds more than ``LIMIT``."""

    LIMIT = 20_000  # a day's picks of a few hundred filters, a month of their bodies

    bodies: dict[str, frozenset[int]] = field(default_factory=dict)
    views: dict[int, EntryView] = field(default_factory=dict)
    rankings: dict[str, tuple[tuple[datetime, datetime, str], Standing]] = field(default_factory=dict)
    tagged: str | None = None
    last_pass: datetime | None = None

    def begin(self, session: Session, now: datetime, cache: SelectionCache, floor: datetime) -> str:
        """Make what is kept current for a pass at *now*, and forget what no ranking of
        it reaches (entries first seen before *floor*, and *cache*'s verdicts on them);
        the store's tags fact."""
        tagged = fact(session, RETAGGED_AT) or ""
        if tagged != self.tagged or self.last_pass is None or self.last_pass > now:
            self.views.clear()
        else:
            for entry_id in entries_seen_or_touched_since(session, self.last_pass - WATERMARK_MARGIN, now):
                self.views.pop(entry_id, None)
        for entry_id in [i for i, view in self.views.items() if view.first_seen_at < floor]:
            del self.views[entry_id]
        cache.forget_before(floor)
        for part in (self.bodies, self.views, self.rankings):
            if len(part) > self.LIMIT:
                part.clear()
        self.tagged, self.last_pass = tagged, now
        return tagged


def memory_of(cache: SelectionCache) -> StandingMemory:
    """The memory kept with *cache* (a pass without a kept cache starts from nothing)."""
    if not isinstance(cache.planning, StandingMemory):
        cache.planning = StandingMemory()
    return cache.planning


@dataclass
class Standings:
    """One pass's standing rankings, and the picks made of them (see the module)."""

    cache: SelectionCache
    rules: TagRules
    now: datetime
    max_age_days: int
    count: int  # digest.max_entries
    ready: dict[str, _Ready | None] = field(default_factory=dict)  # filter text -> ranking (None: none usable)
    tagged: str | None = None
    touched: dict[datetime, list[int]] = field(default_factory=dict)  # since -> entries to weigh again
    picks: dict[tuple[str, datetime | None, frozenset[str]], Picked | None] = field(default_factory=dict)
    unsaved: list[StoredRanking] = field(default_factory=list)
    earliest: dict[str, datetime] = field(default_factory=dict)  # filter -> its readers' earliest watermark

    @property
    def memory(self) -> StandingMemory:
        return memory_of(self.cache)

    @property
    def bodies(self) -> dict[str, frozenset[int]]:
        return self.memory.bodies

    def prepare(self, session: Session, filters: Sequence[str]) -> None:
        """Bring the rankings of *filters* up to date; those that changed wait for ``save``."""
        wanted = sorted({f for f in filters if f not in self.ready and not uses_liked(f)})
        if not wanted:
            return
        if self.tagged is None:
            self.tagged = self.memory.begin(session, self.now, self.cache, span_start(self.now, self.max_age_days))
            self.earliest = earliest_watermarks(session)
        keys = {text: ranking_key(text, self.rules) for text in wanted}
        stamps = ranking_stamps(session, keys.values())
        known = self._known(session, stamps)
        for text in sorted(wanted, key=self._span):  # a ranking made anew loads the longest span first
            key, covers_from = keys[text], self._span(text)
            stamp = stamps.get(key)
            made = self._ready_for(session, text, stamp, known.get(key), covers_from)
            self.ready[text] = None if made is None else _Ready(made[0], covers_from)
            if made is not None:
                self._keep(
                    key, made[0], (self.now, covers_from, self.tagged or "") if made[1] else stamp, dirty=made[1]
                )

    def _ready_for(
        self,
        session: Session,
        text: str,
        stamp: tuple[datetime, datetime, str] | None,
        stored: Standing | None,
        covers_from: datetime,
    ) -> tuple[Standing, bool] | None:
        """The filter's ranking for this pass, and whether it changed: the stored one
        brought up to date, or one made anew; None when a later pass made the stored
        one (this pass makes its readers' rankings from empty and leaves it be)."""
        if stamp is not None and stored is not None:
            made = self._update(session, text, stamp, stored, covers_from)
            if made is not None:
                return made
        if stamp is None or stamp[0] <= self.now:
            return self._made(session, text, covers_from), True
        return None

    def _span(self, text: str) -> datetime:
        """Where the filter's ranking starts this pass: at midnight before the earliest
        window its readers' watermarks open (readers who keep up need days, not a month),
        never before ``span_start``.  A reader whose window starts earlier (new, or whose
        filter changed) gets a ranking made from empty (``bot.plan.fresh_rankings``)."""
        floor = span_start(self.now, self.max_age_days)
        mark = self.earliest.get(text)
        if mark is None:
            return floor
        day = (min(mark, self.now) - WATERMARK_MARGIN).astimezone(UTC).date()
        return max(floor, datetime.combine(day, time(), tzinfo=UTC))

    def _known(self, session: Session, stamps: dict[str, tuple[datetime, datetime, str]]) -> dict[str, Standing]:
        """The stored rankings of *stamps*: as this process kept them when they are the
        same ones, else read; those not readable left out (made again)."""
        kept = self.memory.rankings
        found = {key: kept[key][1] for key, stamp in stamps.items() if key in kept and kept[key][0] == stamp}
        for key, row in ranking_bodies(session, [key for key in stamps if key not in found]).items():
            if (standing := Standing.decode(row.body)) is not None:
                found[key] = standing
        return found

    def _keep(self, key: str, standing: Standing, stamp: tuple[datetime, datetime, str] | None, *, dirty: bool) -> None:
        """Remember a ranking made ready; one that changed waits for ``save``."""
        if stamp is None:
            return
        if dirty:
            self.unsaved.append(StoredRanking(key, stamp[0], stamp[1], stamp[2], standing.encode()))
        self.memory.rankings[key] = stamp, standing

    def save(self, factory: sessionmaker[Session]) -> None:
        """Write the rankings this pass made or changed."""
        if self.unsaved:
            with transaction(factory) as session:
                self.save_in(session)
            self.unsaved.clear()

    def save_in(self, session: Session) -> None:
        """``save`` in the caller's transaction; the caller clears ``unsaved`` once it commits."""
        store_rankings(session, self.unsaved)

    def _made(self, session: Session, text: str, covers_from: datetime) -> Standing:
        return made_from_empty(session, self.cache, self.rules, text, covers_from, self.now)

    def _update(
        self,
        session: Session,
        text: str,
        stamp: tuple[datetime, datetime, str],
        standing: Standing,
        covers_from: datetime,
    ) -> tuple[Standing, bool] | None:
        """The stored ranking with what is new or changed since it was made; None when it
        cannot be brought up to date (made under other tags, later than this pass, or
        over a later span)."""
        weighed_to, covered_from, tagged = stamp
        if tagged != self.tagged or weighed_to > self.now or covered_from > covers_from:
            return None
        weighed = self._weigh_again(session, weighed_to - WATERMARK_MARGIN, covers_from)
        found = [
            Match.of(e.id, e.first_seen_at, e.content.published, x)
            for e in weighed
            if (x := self.cache.verdict(text, e, self.rules)) is not None
        ]
        ids = [e.id for e in weighed]
        fresh = self.now - weighed_to < timedelta(days=1)  # else written again, so retention sees it used
        if fresh and covered_from == covers_from and standing.holds(found, ids):
            return standing, False
        return standing.merged(ids, found, micros(covers_from)), True

    def _weigh_again(self, session: Session, since: datetime, covers_from: datetime) -> list[EntryView]:
        """The entries of the span first seen since *since* or listed by a source ingested
        since then, read fresh (their text or tags may have changed)."""
        if since not in self.touched:
            ids = entries_seen_or_touched_since(session, since, self.now)
            fresh = entries_by_ids(session, ids)
            self.cache.refresh(fresh)
            self.memory.views.update((e.id, e) for e in fresh)
            self.touched[since] = [e.id for e in fresh if covers_from <= e.first_seen_at <= self.now]
        views = self.memory.views
        return [views[entry_id] for entry_id in self.touched[since]]

    def choose(self, session: Session, readers: Sequence[tuple[int, str, datetime | None]]) -> dict[int, Picked]:
        """What each reader of *readers* (subscriber id, filter, window start) gets, for
        those whose filter's ranking is ready and spans their window; the others are
        left out, for ``bot.plan.fresh_rankings``."""
        served = [
            (sid, text, start)
            for sid, text, start in readers
            if start is not None and (ready := self.ready.get(text)) is not None and start >= ready.covers_from
        ]
        if not served:
            return {}
        groups = reader_groups(session, self.bodies, served)
        chosen = {sid: (text, start, groups.get(sid, frozenset())) for sid, text, start in served}
        new = {key: self._standing_pick(*key) for key in set(chosen.values()) if key not in self.picks}
        self._read_views(session, [entry_id for raw in new.values() for entry_id in raw.chosen])
        for key, raw in new.items():
            self.picks[key] = self._candidates(key[0], raw)
        return {sid: picked for sid, key in chosen.items() if (picked := self.picks[key]) is not None}

    def _read_views(self, session: Session, entry_ids: list[int]) -> None:
        views = self.memory.views
        absent = [entry_id for entry_id in set(entry_ids) if entry_id not in views]
        if absent:
            fresh = entries_by_ids(session, absent)
            self.cache.refresh(fresh)
            views.update((e.id, e) for e in fresh)

    def _standing_pick(self, text: str, start: datetime | None, group: frozenset[str]) -> StandingPick:
        ready = self.ready[text]
        assert ready is not None
        claimed = frozenset().union(*(self.bodies[key] for key in group))
        return ready.standing.pick(start, claimed, self.count)

    def _candidates(self, text: str, raw: StandingPick) -> Picked | None:
        chosen: list[Candidate] = []
        views = self.memory.views
        for entry_id in raw.chosen:
            entry = views.get(entry_id)
            explanation = self.cache.verdict(text, entry, self.rules) if entry is not None else None
            if entry is None or explanation is None:
                return None  # the ranking and the store disagree: one made from empty decides
            chosen.append(Candidate(entry, explanation))
        return Picked(chosen, raw.left, raw.oldest_left)


def reader_groups(
    session: Session, bodies: dict[str, frozenset[int]], served: list[tuple[int, str, datetime]]
) -> dict[int, frozenset[str]]:
    """Per reader of *served*, the bodies of their digests planned since their window
    could start (readers of one filter share them); what those bodies hold is read into
    *bodies*."""
    ids = [sid for sid, _, _ in served]
    since = min(start for _, _, start in served)
    groups: dict[int, frozenset[str]] = {}
    for keys, subscriber_ids in body_groups_since(session, min(ids), max(ids), since):
        group = frozenset(keys.split())
        groups.update((sid, group) for sid in subscriber_ids)
    read_bodies(session, {key for keys in set(groups.values()) for key in keys}, bodies)
    return groups


def made_from_empty(
    session: Session, cache: SelectionCache, rules: TagRules, text: str, covers_from: datetime | None, now: datetime
) -> Standing:
    """The filter's ranking of the entries first seen from *covers_from* to *now*, every
    entry weighed (or its verdict kept): how a kept ranking is first made, and a window
    no kept ranking spans (``bot.plan.fresh_rankings``)."""
    entries = cache.entries(session, covers_from, now)
    return Standing(
        Match.of(e.id, e.first_seen_at, e.content.published, x)
        for e in entries
        if (x := cache.verdict(text, e, rules)) is not None
    )
