"""Plan stage: who is due, what each gets, and manual resends.

Planning decides from the database alone: a subscriber is due once their
local send time has passed today and they have no scheduled digest for that
local day (a partial unique index makes a second one impossible).  A digest
claims its entries in the ledger when planned.  A resend queues a copy of a
digest, linked to its original, and never touches the ledger.  Never renders,
never sends.
"""

from __future__ import annotations

import hashlib
import logging
import zoneinfo
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.select import Candidate, SelectionCache, effective_start, local_send_time, select_for
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.domain import DigestKind, DigestState, EntryView, Subscriber, SubscriberStatus
from bot.mail.message import message_id_for
from bot.mail.render import primary_url
from bot.store.digests import (
    DigestRow,
    failed_without_resend,
    get_digest,
    list_digests,
    lock_digest,
    pending_resend_of,
    set_message_id,
)
from bot.store.engine import transaction
from bot.store.ledger import NewDigest, Planned, claimed_from, create_digest, insert_digests, scheduled_days
from bot.store.subscribers import set_watermarks, subscribers_after, watermarks

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]


class IdRuns:
    """Ids in the order they were added, kept as runs of consecutive numbers.

    A planning pass may queue a million digests, and a batch's digests get
    consecutive ids (only its empty digests break a run): runs hold them in a
    fraction of a list's or an array's memory (bench/README.md, planning)."""

    __slots__ = ("_starts", "_lengths", "_count")

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._starts = array("q")
        self._lengths = array("q")
        self._count = 0
        for value in ids:
            self.append(value)

    def append(self, value: int) -> None:
        if self._starts and self._starts[-1] + self._lengths[-1] == value:
            self._lengths[-1] += 1
        else:
            self._starts.append(value)
            self._lengths.append(1)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        for start, length in zip(self._starts, self._lengths, strict=True):
            yield from range(start, start + length)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdRuns) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"IdRuns({list(self)!r})"


@dataclass
class PlanReport:
    planned: IdRuns = field(default_factory=IdRuns)  # digest ids queued, in order
    empty: int = 0  # due subscribers with nothing new
    not_due: int = 0


def local_today(subscriber: Subscriber, now: datetime) -> date:
    return now.astimezone(zoneinfo.ZoneInfo(subscriber.timezone)).date()


PLAN_BATCH = 1000  # subscribers read, selected for and written per transaction


# Entries first seen this long before a watermark are weighed again: an ingest
# that began before a planning pass but committed after it is not skipped.
WATERMARK_MARGIN = timedelta(hours=1)


def planned_key(subscriber: Subscriber, rules: TagRules) -> str:
    """What a watermark is valid for: the subscriber's filter and backfill and the tag rules."""
    return _planned_key(subscriber.filter, subscriber.backfill, rules.fingerprint)


@lru_cache(maxsize=4096)  # subscribers share a few hundred filters
def _planned_key(filter_text: str, backfill: str, rules_fingerprint: str) -> str:
    text = f"{filter_text}\x00{backfill}\x00{rules_fingerprint}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def plan(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    *,
    now: datetime,
    all_due: bool = False,
    subscribers: Iterable[Subscriber] | None = None,
    kind: DigestKind = DigestKind.SCHEDULED,
) -> PlanReport:
    """Queue a digest for every active subscriber whose send time has passed today
    (or every one, with *all_due*) and who has none for today.

    Set-based: subscribers are read in batches of ``PLAN_BATCH`` by id; each
    (filter, window) is ranked once per pass (``SelectionCache``); a batch's
    digests and ledger rows are written in one transaction.  A subscriber's
    window starts at their watermark (less a margin) when they have a valid one,
    so planning reads about a day of entries and ledger rows per subscriber
    however long the history; the result is what the whole window would give,
    because every entry behind the watermark was claimed or did not match."""
    report = PlanReport()
    cache = SelectionCache()
    memo: dict[tuple[int, int], Planned] = {}
    if subscribers is not None:
        chosen = [s for s in subscribers if s.status is SubscriberStatus.ACTIVE]
        batches: Iterable[list[Subscriber]] = (chosen[i : i + PLAN_BATCH] for i in range(0, len(chosen), PLAN_BATCH))
    else:
        batches = _active_batches(factory)
    for batch in batches:
        due: list[tuple[Subscriber, date]] = []
        for subscriber in batch:
            day = local_today(subscriber, now)
            if kind is DigestKind.SCHEDULED and not all_due and now < local_send_time(subscriber, day):
                report.not_due += 1
                continue
            due.append((subscriber, day))
        if due:
            _plan_batch(factory, settings, rules, due, now=now, kind=kind, cache=cache, memo=memo, report=report)
    return report


def _active_batches(factory: sessionmaker[Session]) -> Iterable[list[Subscriber]]:
    after = 0
    while True:
        with factory() as session:
            batch = subscribers_after(session, after, PLAN_BATCH, status=SubscriberStatus.ACTIVE)
        if not batch:
            return
        yield batch
        after = batch[-1].id


def _plan_batch(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    due: list[tuple[Subscriber, date]],
    *,
    now: datetime,
    kind: DigestKind,
    cache: SelectionCache,
    memo: dict[tuple[int, int], Planned],
    report: PlanReport,
) -> None:
    with factory() as session:
        if kind is DigestKind.SCHEDULED:
            done = scheduled_days(session, [s.id for s, _ in due], {d for _, d in due})
            due = [(s, d) for s, d in due if (s.id, d) not in done]
        keys = {s.id: planned_key(s, rules) for s, _ in due}
        starts = _window_starts(session, due, keys)
        claimed = _claimed(session, due, starts, cache, now)
        choices: list[NewDigest] = []
        marks: list[tuple[int, datetime, str]] = []
        for subscriber, day in due:
            candidates = select_for(
                session,
                subscriber,
                rules,
                as_of=now,
                cache=cache,
                start=starts[subscriber.id],
                exclude=claimed.get(subscriber.id, frozenset()),
            )
            chosen = candidates[: settings.digest.max_entries]
            if len(chosen) == len(candidates):
                marks.append((subscriber.id, now, keys[subscriber.id]))
            state = digest_state(len(chosen), send_empty=settings.digest.send_empty, kind=kind)
            if state is None:
                report.empty += 1
                continue
            entries = [_planned_entry(c, settings, memo) for c in chosen]
            choices.append(NewDigest(subscriber.id, day, kind, state, entries, len(candidates) - len(chosen)))
    for digest_id, choice in _write(factory, choices, marks, now=now, make_id=_message_id(settings)):
        if choice.state is DigestState.EMPTY:
            report.empty += 1
        else:
            report.planned.append(digest_id)


def digest_state(entries: int, *, send_empty: bool, kind: DigestKind) -> DigestState | None:
    """What a due subscriber's digest is: queued when it has entries (or empty ones are
    sent), an ``empty`` record for a scheduled day with nothing (so the planner does
    not look again every minute), or none at all for a manual one with nothing."""
    if entries or send_empty:
        return DigestState.QUEUED
    return DigestState.EMPTY if kind is DigestKind.SCHEDULED else None


def _window_starts(
    session: Session, due: list[tuple[Subscriber, date]], keys: dict[int, str]
) -> dict[int, datetime | None]:
    """Where each subscriber's window starts: their watermark less a margin when it is
    valid for their filter and the rules, else None (the whole backfill window)."""
    known = watermarks(session, [s.id for s, _ in due])
    starts: dict[int, datetime | None] = {}
    for subscriber, _ in due:
        mark = known.get(subscriber.id)
        starts[subscriber.id] = mark[0] - WATERMARK_MARGIN if mark and mark[1] == keys[subscriber.id] else None
    return starts


def _claimed(
    session: Session,
    due: list[tuple[Subscriber, date]],
    starts: dict[int, datetime | None],
    cache: SelectionCache,
    now: datetime,
) -> dict[int, set[int]]:
    """The entries of each subscriber's window that the ledger says they already got.

    The ledger is read per window: the batch's rows of the window's entries
    (subscribers whose windows start together share the read)."""
    by_window: dict[datetime | None, tuple[list[EntryView], list[int]]] = {}
    for subscriber, _ in due:
        start = effective_start(subscriber, starts[subscriber.id])
        window = cache.entries(session, start, now)
        if window:
            by_window.setdefault(start, (window, []))[1].append(subscriber.id)
    claimed: dict[int, set[int]] = {}
    for window, ids in by_window.values():
        claimed.update(claimed_from(session, ids, [entry.id for entry in window]))
    return claimed


def _write(
    factory: sessionmaker[Session],
    choices: list[NewDigest],
    marks: list[tuple[int, datetime, str]],
    *,
    now: datetime,
    make_id: Callable[[int, NewDigest], str],
) -> list[tuple[int, NewDigest]]:
    """Write a batch's digests and watermarks in one transaction; the ids and digests written."""
    try:
        with transaction(factory) as session:
            ids = insert_digests(session, choices, now=now, message_id=make_id)
            set_watermarks(session, marks)
        return list(zip(ids, choices, strict=True))
    except IntegrityError:
        pass
    # Another planner took some of these subscribers' days (or entries) first:
    # write the others one by one and leave those alone.
    written: list[tuple[int, NewDigest]] = []
    for choice in choices:
        try:
            with transaction(factory) as session:
                (digest_id,) = insert_digests(session, [choice], now=now, message_id=make_id)
                set_watermarks(session, [m for m in marks if m[0] == choice.subscriber_id])
        except IntegrityError:
            continue
        written.append((digest_id, choice))
    return written


def _planned_entry(candidate: Candidate, settings: Settings, memo: dict[tuple[int, int], Planned]) -> Planned:
    """The ledger row's content; the same for every subscriber of one filter, so made once a pass."""
    key = (id(candidate.explanation), candidate.entry.id)  # explanations live as long as the pass's cache
    if key not in memo:
        entry = candidate.entry
        memo[key] = Planned(
            entry.id,
            entry.summary_source_id,
            candidate.explanation.why(),
            entry.tags,
            primary_url(entry, settings.digest.search_url),
        )
    return memo[key]


def _message_id(settings: Settings) -> Callable[[int, NewDigest], str]:
    def make(digest_id: int, digest: NewDigest) -> str:
        return message_id_for(digest_id, digest.subscriber_id, digest.local_date, digest.kind.value, settings.sender)

    return make


class DigestNotFound(LookupError):
    pass


class ResendPending(ValueError):
    """A resend of this digest is already on its way."""


def resend(factory: sessionmaker[Session], settings: Settings, digest_id: int, *, now: datetime) -> int:
    """Queue a copy of a digest: same entries and pinned summaries, a new
    Message-ID, recorded as a resend of the original; the ledger is not touched.
    A digest with a resend still on its way gets no second one."""
    with transaction(factory) as session:
        original = get_digest(session, digest_id)
        if original is None or original.state is DigestState.EMPTY:
            raise DigestNotFound(f"no digest #{digest_id} with entries")
        source = original.resend_of if original.kind is DigestKind.RESEND and original.resend_of else original.id
        lock_digest(session, source)  # two resends at once must not both pass the check below
        pending = pending_resend_of(session, source)
        if pending is not None:
            raise ResendPending(f"digest #{source} already has resend #{pending} on its way")
        new_id = create_digest(
            session,
            subscriber_id=original.subscriber_id,
            local_date=original.local_date,
            kind=DigestKind.RESEND,
            state=DigestState.QUEUED,
            now=now,
            entries=[],
            message_id="",
            resend_of=source,
        )
        set_message_id(
            session,
            new_id,
            message_id_for(new_id, original.subscriber_id, original.local_date, "resend", settings.sender),
        )
        return new_id


def resend_failed(factory: sessionmaker[Session], settings: Settings, *, now: datetime) -> list[int]:
    """One resend for each failed digest that no resend has delivered or is delivering
    (failed resends are not resent themselves: their original is); run twice, it
    queues nothing the second time while the first run's resends are on their way
    or delivered."""
    with factory() as session:
        targets = failed_without_resend(session)
    queued = []
    for digest_id in targets:
        try:
            queued.append(resend(factory, settings, digest_id, now=now))
        except ResendPending:  # another run queued it meanwhile
            continue
    return queued


def find_scheduled(factory: sessionmaker[Session], subscriber_id: int, day: date) -> DigestRow | None:
    with factory() as session:
        rows = list_digests(session, subscriber_id=subscriber_id, local_date=day, kind=DigestKind.SCHEDULED)
    return rows[0] if rows else None
