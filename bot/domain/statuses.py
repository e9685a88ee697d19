"""Domain: every change of a subscriber's status, as pure rules.  Every path that
changes one (the manage page, the one-click link and its journal, ``subscribers``
commands, a confirmation link, delivery's refusals, returned mail) asks here and only
applies the answer; ``tests/test_statuses.py`` finds no second spelling of a change.
Never reads or writes anything.

- A reader pauses, resumes and subscribes again on their manage page
  (``READER_ACTIONS``); an operator pauses and resumes (``OPERATOR_ACTIONS``).
- Their link confirms a sign-up: active (``after_confirm``).
- An unsubscribe (their link, a complaint, a mail to the List-Unsubscribe address,
  ``subscribers remove``) unsubscribes whoever is not already (``after_unsubscribe``).
- Bounces reaching their limit make an active or paused reader bounced
  (``after_bounces``), whether the relay refused the message (delivery counts them) or
  a bounce came back to the returned-mail inbox: a paused address that bounces would
  bounce again on resume, so a pause does not shield it; a pending, unsubscribed or
  bounced reader stays as they are.
- A return's kind decides which of those it is (``after_return``); a delay notice
  changes nothing.  Nobody is ever made active but by a confirmation, a reader's
  button or an operator's command.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.domain import SubscriberStatus
from bot.domain.returned import ReturnKind


@dataclass(frozen=True, slots=True)
class StatusAction:
    """A status change: from which statuses, to which, and what is then said of it."""

    before: frozenset[SubscriberStatus]
    after: SubscriberStatus
    said: str

    @property
    def staying(self) -> frozenset[SubscriberStatus]:
        """The statuses it leaves as they are."""
        return frozenset(SubscriberStatus) - self.before


_ACTIVE, _PAUSED = SubscriberStatus.ACTIVE, SubscriberStatus.PAUSED

# What a reader may change themselves, and what their manage page then says.
READER_ACTIONS = {
    "pause": StatusAction(frozenset({_ACTIVE}), _PAUSED, "Paused: no digests until you resume."),
    "resume": StatusAction(frozenset({_PAUSED}), _ACTIVE, "Resumed: your next digest comes as usual."),
    "resubscribe": StatusAction(
        frozenset({SubscriberStatus.UNSUBSCRIBED}), _ACTIVE, "Subscribed again: your next digest comes as usual."
    ),
}

# What an operator may change.  Resume also clears a bounce and subscribes an
# unsubscribed reader again (which the consent record shows); a pending one is
# confirmed by their link or vouched for by ``subscribers add``.  Pause only stops
# someone who receives digests: pausing an unsubscribed reader would let a later resume
# subscribe them again with no consent event.
OPERATOR_ACTIONS = {
    "pause": StatusAction(frozenset({_ACTIVE, _PAUSED}), _PAUSED, "paused"),
    "resume": StatusAction(frozenset(SubscriberStatus) - {SubscriberStatus.PENDING}, _ACTIVE, "resumed"),
}

# A new address: pending when it signs up itself (until its link confirms it), active
# when an operator adds it (``subscribers add`` vouches for it).
SIGNED_UP = SubscriberStatus.PENDING
ADDED = _ACTIVE

# Who ``subscribers add`` may add again (active from then, vouched for by the operator);
# anyone else is already on the list, or bounced until an operator resumes them.
ADDED_AGAIN_FROM = frozenset({SubscriberStatus.UNSUBSCRIBED, SubscriberStatus.PENDING})

# Who a confirmation link makes active: whoever signed up and is not on the list.
CONFIRMED_FROM = frozenset({SubscriberStatus.PENDING, SubscriberStatus.UNSUBSCRIBED, SubscriberStatus.BOUNCED})

# An unsubscribe changes everyone not unsubscribed already; the journal applies it in
# bulk, in SQL, by this (a status digestbot never writes changes too: it is not in
# ``staying``).
UNSUBSCRIBE = StatusAction(
    frozenset(SubscriberStatus) - {SubscriberStatus.UNSUBSCRIBED}, SubscriberStatus.UNSUBSCRIBED, "unsubscribed"
)

# Who bounces can make bounced: whoever is on the list, receiving or paused.
BOUNCED_FROM = frozenset(status for status in SubscriberStatus if status.subscribed)


@dataclass(frozen=True, slots=True)
class BounceLimits:
    hard_bounces: int  # smtp.bounce_threshold
    soft_bounces: int  # inbox.soft_bounce_limit (within inbox.soft_bounce_days)


def reader_action(action: str, status: SubscriberStatus) -> StatusAction | None:
    """The change a reader of *status* asks for with *action*; None when it is none a
    reader may make now."""
    found = READER_ACTIONS.get(action)
    return found if found is not None and status in found.before else None


def after_confirm(status: SubscriberStatus) -> SubscriberStatus | None:
    """A confirmation link makes whoever signed up active: pending, or unsubscribed or
    bounced and signed up again (``bot.subscribers.optin``); None for someone already
    on the list."""
    return _ACTIVE if status in CONFIRMED_FROM else None


def after_added_again(status: SubscriberStatus) -> SubscriberStatus | None:
    """``subscribers add`` for a known address of *status*; None when it is refused."""
    return ADDED if status in ADDED_AGAIN_FROM else None


def after_unsubscribe(status: SubscriberStatus) -> SubscriberStatus | None:
    """An unsubscribe, by whatever way it came; None when they are unsubscribed already."""
    return UNSUBSCRIBE.after if status in UNSUBSCRIBE.before else None


def after_bounces(status: SubscriberStatus, count: int, limit: int) -> SubscriberStatus | None:
    """*count* bounces that count (the latest included) against their *limit*."""
    return SubscriberStatus.BOUNCED if status in BOUNCED_FROM and count >= limit else None


def after_return(
    kind: ReturnKind, status: SubscriberStatus, count: int, limits: BounceLimits
) -> SubscriberStatus | None:
    """The status a subscriber in *status* gets from one more returned mail of *kind*,
    of which they now have *count* that count (this one included); None when nothing
    changes."""
    if kind in (ReturnKind.COMPLAINT, ReturnKind.UNSUBSCRIBE):
        return after_unsubscribe(status)
    if kind is ReturnKind.HARD:
        return after_bounces(status, count, limits.hard_bounces)
    if kind is ReturnKind.SOFT:
        return after_bounces(status, count, limits.soft_bounces)
    return None


def consent_change(before: SubscriberStatus, after: SubscriberStatus) -> str | None:
    """The consent event a status change is (``unsubscribe``, ``resubscribe``), or None
    when it is none (a pause, a bounce): the consent record shows how a reader came to
    be subscribed, and how they stopped."""
    if after is SubscriberStatus.UNSUBSCRIBED and before is not SubscriberStatus.UNSUBSCRIBED:
        return "unsubscribe"
    if before is SubscriberStatus.UNSUBSCRIBED and after is SubscriberStatus.ACTIVE:
        return "resubscribe"
    return None
