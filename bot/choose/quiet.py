"""Choose stage: what a subscriber's next digest holds so far, and why it is empty when it
is ("no email today: why?").

Looks back at most ``LOOKBACK`` (a week): a page anyone with their link may open must not
read the whole store.  Reads the store, never writes it, never renders or sends.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from bot.choose.select import SelectionCache, effective_start, select_for
from bot.choose.tagging import TagRules
from bot.domain import Subscriber
from bot.store.entry_reads import entries_first_seen_between
from bot.store.ledger import claimed_entry_ids

LOOKBACK = timedelta(days=7)
SHOWN_TAGS = 8


@dataclass(frozen=True, slots=True)
class Outlook:
    """What the subscriber's next digest would hold as of one moment."""

    since: datetime  # the start of the window looked at
    matching: int  # entries new to them that their filter matches
    unseen: int  # entries new to them, matching or not
    tags: tuple[tuple[str, int], ...]  # the most common tags of the unseen ones, with counts
    first: tuple[tuple[str, str], ...] = ()  # (title, why) of the best matching ones, best first


def outlook(session: Session, subscriber: Subscriber, rules: TagRules, *, as_of: datetime, first: int = 0) -> Outlook:
    """What is waiting for *subscriber* as of *as_of*, with the titles and reasons of the
    *first* best of the matching entries (in their model's order, when they have one:
    ``bot.taste.explain``, as ``preview`` shows them)."""
    from bot.taste.explain import liked_for, reader_taste, scored

    since = effective_start(subscriber, as_of - LOOKBACK) or as_of - LOOKBACK
    sent = claimed_entry_ids(session, subscriber.id)
    cache = SelectionCache()
    taste = reader_taste(session, subscriber, since, cache.entries(session, since, as_of))
    liked = liked_for(subscriber.filter, taste, subscriber.taste_threshold)
    matching = select_for(session, subscriber, rules, as_of=as_of, exclude=sent, start=since, cache=cache, liked=liked)
    unseen = [e for e in entries_first_seen_between(session, since, as_of) if e.id not in sent]
    tally = Counter(tag for entry in unseen for tag in entry.tags)
    ranked = sorted(tally.items(), key=lambda item: (-item[1], item[0].casefold()))
    best = tuple((s.candidate.entry.title, s.why) for s in scored(taste, matching)[:first]) if first else ()
    return Outlook(since, len(matching), len(unseen), tuple(ranked[:SHOWN_TAGS]), best)


def outlook_note(seen: Outlook) -> str:
    """One or two sentences for a person: what is waiting, or why nothing is."""
    since = f"since {seen.since:%d %B %Y}"
    if seen.matching:
        noun = "entry matches" if seen.matching == 1 else "entries match"
        return f"{seen.matching} new {noun} your filter {since}: they go out in your next digest."
    if not seen.unseen:
        return f"No email: nothing new has arrived {since}."
    noun = "entry" if seen.unseen == 1 else "entries"
    tags = ", ".join(f"{tag} ({count})" for tag, count in seen.tags)
    hint = f" Their tags: {tags}; a filter naming some of them would bring them." if tags else ""
    return f"No email: {seen.unseen} {noun} you were not sent arrived {since}, and none matches your filter.{hint}"
