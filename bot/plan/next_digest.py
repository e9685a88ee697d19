"""Plan stage: a subscriber's next digest, the one place that says when it goes out and
what it would hold so far, or why it is empty ("no email today: why?").

``preview``, the manage page and ``subscribers show`` all ask here.  Looks back at most
``LOOKBACK`` (a week): a page anyone with their link may open must not read the whole
store.  Reads the store, never writes it, never renders or sends.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.candidates import effective_start, local_send_time
from bot.choose.select import SelectionCache, select_for
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.domain import Subscriber, SubscriberStatus
from bot.plan.cadence import mails, next_send_day, sends_on
from bot.plan.days import DayFacts, closes_at, local_time, local_today, today_note
from bot.plan.resend import find_scheduled
from bot.plan.retention import kept_since
from bot.plan.sections import Sectioner
from bot.store.claims import claimed_entry_ids
from bot.store.digests import last_digest_with_entries
from bot.store.entry_reads import entries_first_seen_between
from bot.store.ledger import entry_count_of, scheduled_days
from bot.taste.explain import Scored, liked_for, reader_taste, scored

LOOKBACK = timedelta(days=7)
SHOWN_TAGS = 8


def send_day(cadence: str, today: date, *, planned_today: bool) -> date:
    """The local day the next scheduled digest goes out: today when the cadence sends
    today and today's is not planned yet, else the cadence's next day after today."""
    day = next_send_day(cadence, today)
    if day == today and planned_today:
        day = next_send_day(cadence, today + timedelta(days=1))
    return day


def next_day(session: Session, subscriber: Subscriber, now: datetime) -> date:
    """The local day of *subscriber*'s next scheduled digest, as the store stands."""
    today = local_today(subscriber.timezone, now)
    planned = bool(scheduled_days(session, [subscriber.id], {today}))
    return send_day(subscriber.cadence, today, planned_today=planned)


@dataclass(frozen=True, slots=True)
class Outlook:
    """What the subscriber's next digest would hold as of one moment."""

    since: datetime  # the start of the window looked at
    matching: int  # entries new to them that their filter matches
    unseen: int  # entries new to them, matching or not
    tags: tuple[tuple[str, int], ...]  # the most common tags of the unseen ones, with counts
    first: tuple[tuple[str, str], ...] = ()  # (title, why) of the best matching ones, best first
    last_digest: date | None = None  # the local day of their latest digest with entries, when inside the window


def outlook(session: Session, subscriber: Subscriber, rules: TagRules, *, as_of: datetime, first: int = 0) -> Outlook:
    """What is waiting for *subscriber* as of *as_of*, with the titles and reasons of the
    *first* best of the matching entries (in their model's order, when they have one, as
    ``preview`` shows them)."""
    since = effective_start(subscriber, as_of - LOOKBACK) or as_of - LOOKBACK
    sent = claimed_entry_ids(session, subscriber.id)
    cache = SelectionCache()
    taste = reader_taste(session, subscriber, since, cache.entries(session, since, as_of))
    liked = liked_for(subscriber.filter, taste, subscriber.taste_threshold)
    matching = select_for(session, subscriber, rules, as_of=as_of, exclude=sent, start=since, cache=cache, liked=liked)
    unseen = [e for e in entries_first_seen_between(session, since, as_of) if e.id not in sent]
    tally = Counter(tag for entry in unseen for tag in entry.tags)
    ranked = sorted(tally.items(), key=lambda item: (-item[1], item[0].casefold()))
    placing = Sectioner(cache, rules).interest_of(subscriber.filter, liked)
    best = (
        tuple((s.candidate.entry.content.title, s.why) for s in scored(taste, matching, placing)[:first])
        if first
        else ()
    )
    last = last_digest_with_entries(session, subscriber.id)
    recent = last[0] if last is not None and last[1] >= since else None
    return Outlook(since, len(matching), len(unseen), tuple(ranked[:SHOWN_TAGS]), best, recent)


def outlook_note(seen: Outlook, *, to_reader: bool = True, mailed: bool = True) -> str:
    """One or two sentences: what is waiting, or why nothing is; said to the reader (the
    manage page), or about them to an operator (``preview``); for a reader whose digests
    only go into their feed (*mailed* False), of the feed, not of mail."""
    your, you = ("your", "you") if to_reader else ("their", "they")
    # The window can start before the digest just sent (its left-overs keep it open):
    # "since 24 November" read as "nothing sent since", the day after a digest.
    if seen.last_digest is not None:
        since = f"since {your} digest of {seen.last_digest:%d %B %Y}"
    else:
        since = f"since {seen.since:%d %B %Y}"
    if seen.matching:
        noun = "entry matches" if seen.matching == 1 else "entries match"
        goes = f"go out in {your} next digest" if mailed else f"go into {your} feed with {your} next digest"
        return f"{seen.matching} new {noun} {your} filter {since}: they {goes}."
    # Not "No email": said moments after a digest went out, it read like an address missing.
    nothing = f"Nothing for {your} next digest yet" if mailed else f"Nothing new for {your} feed"
    if not seen.unseen:
        return f"{nothing}: nothing new has arrived {since}."
    noun = "entry" if seen.unseen == 1 else "entries"
    tags = ", ".join(f"{tag} ({count})" for tag, count in seen.tags)
    hint = f" Their tags: {tags}; a filter naming some of them would bring them." if tags else ""
    return f"{nothing}: {seen.unseen} {noun} {you} were not sent arrived {since}, and none matches {your} filter.{hint}"


@dataclass(frozen=True, slots=True)
class EntriesPreview:
    """What ``preview EMAIL`` says: the entries the next digest would hold as of one
    moment, best first, and, when none, why; the model's scores when they have one."""

    as_of: datetime
    found: list[Scored]
    ranked_by_taste: bool  # the reader has a model: score + 3 x taste orders them
    empty_note: str  # why nothing matches (said only when nothing does)


def preview_entries(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    subscriber: Subscriber,
    *,
    as_of: datetime,
    now: datetime,
) -> EntriesPreview:
    """The entries *subscriber*'s digest would hold as of *as_of*, as the planner would
    choose and order them, with each one's relevance and taste; nothing is written."""
    cache = SelectionCache()
    with factory() as session:
        start = effective_start(subscriber, kept_since(settings, now))
        taste = reader_taste(session, subscriber, start, cache.entries(session, start, as_of))
        liked = liked_for(subscriber.filter, taste, subscriber.taste_threshold)
        exclude = claimed_entry_ids(session, subscriber.id)
        found = select_for(
            session, subscriber, rules, as_of=as_of, start=start, exclude=exclude, cache=cache, liked=liked
        )
        note = (
            ""
            if found
            else outlook_note(
                outlook(session, subscriber, rules, as_of=as_of), to_reader=False, mailed=mails(subscriber.cadence)
            )
        )
    placing = Sectioner(cache, rules).interest_of(subscriber.filter, liked)
    return EntriesPreview(as_of, scored(taste, found, placing), taste is not None, note)


# Why nothing goes out to a reader who is not active, as an operator reads it.
_NOT_ACTIVE = {
    SubscriberStatus.UNSUBSCRIBED: "they unsubscribed (their manage page subscribes them again)",
    SubscriberStatus.PAUSED: "they are paused ('subscribers resume EMAIL' resumes them)",
    SubscriberStatus.BOUNCED: "mail to them bounced ('subscribers resume EMAIL' once the address works)",
    SubscriberStatus.PENDING: "they have not confirmed their sign-up yet",
}


def when_note(factory: sessionmaker[Session], settings: Settings, subscriber: Subscriber, at: datetime) -> str:
    """When what ``preview`` lists for *subscriber* would go out (``days.today_note``),
    given their cadence and today's scheduled digest; nothing, and why, for a reader who
    is not active."""
    if subscriber.status is not SubscriberStatus.ACTIVE:
        return f"nothing goes out: {_NOT_ACTIVE.get(subscriber.status, subscriber.status.value)}"
    tz = subscriber.timezone
    today = local_today(tz, at)
    row = find_scheduled(factory, subscriber.id, today)
    facts = (
        None
        if row is None
        else DayFacts(today, row.state, row.planned_at, row.sent_at, row.nothing_at, row.arrived, row.attempts > 0)
    )
    day = send_day(subscriber.cadence, today, planned_today=row is not None)
    closes = closes_at(today, send_hour=subscriber.send_hour, close_hour=settings.schedule.day_closes_hour, timezone=tz)
    send_at = local_time(day, subscriber.send_hour, tz)
    sends_today = sends_on(subscriber.cadence, today)
    return today_note(facts, timezone=tz, send_at=send_at, closes_at=closes, now=at, sends_today=sends_today)


@dataclass(frozen=True, slots=True)
class DayLine:
    email: str
    send_at: datetime  # the reader's send time that day (UTC), whether past or to come
    entries: int  # what went out, or would go out
    held_back: int  # matching entries beyond digest.max_entries, for the next day
    state: str = ""  # the day's digest's state once planned ("sent", "empty", …); "" while to come


def day_table(
    factory: sessionmaker[Session],
    settings: Settings,
    rules: TagRules,
    subscribers: list[Subscriber],
    day: date,
    now: datetime,
) -> list[DayLine]:
    """What each active subscriber's scheduled digest of *day* would hold (those whose
    cadence sends that day), as of its send time (or *now*, when that has passed), with
    what the store holds now (nothing is planned or written)."""
    cap = settings.digest.max_entries
    lines = []
    with factory() as session:
        planned = scheduled_days(session, [s.id for s in subscribers], {day})
        for subscriber in subscribers:
            if subscriber.status is not SubscriberStatus.ACTIVE or not sends_on(subscriber.cadence, day):
                continue
            send_at = local_send_time(subscriber, day)
            made = planned.get((subscriber.id, day))
            if made is not None:  # the day's digest exists: what it holds, not what another would
                held = entry_count_of(session, made.digest_id)
                lines.append(DayLine(subscriber.email, send_at, held, 0, made.state.value))
                continue
            found = select_for(
                session,
                subscriber,
                rules,
                as_of=max(send_at, now),  # its window as it would be planned: at its time, or now when later
                exclude=claimed_entry_ids(session, subscriber.id),
                start=kept_since(settings, now),
            )
            lines.append(DayLine(subscriber.email, send_at, min(len(found), cap), max(0, len(found) - cap)))
    return lines
