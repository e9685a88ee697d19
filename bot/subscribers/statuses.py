"""Subscriber service: the rules of a reader's status, pure: which changes a reader may
make on their manage page, which an operator may make with ``subscribers pause`` and
``resume``, and which changes are consent events.  Never reads or
writes anything (``subscriptions`` applies them).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.domain import SubscriberStatus


@dataclass(frozen=True, slots=True)
class StatusAction:
    """A status change: from which statuses, to which, and what is then said of it."""

    before: frozenset[SubscriberStatus]
    after: SubscriberStatus
    said: str


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


def reader_action(action: str, status: SubscriberStatus) -> StatusAction | None:
    """The change a reader of *status* asks for with *action*; None when it is none a
    reader may make now."""
    found = READER_ACTIONS.get(action)
    return found if found is not None and status in found.before else None


def consent_change(before: SubscriberStatus, after: SubscriberStatus) -> str | None:
    """The consent event a status change is (``unsubscribe``, ``resubscribe``), or None
    when it is none (a pause, a bounce): the consent record shows how a reader came to
    be subscribed, and how they stopped."""
    if after is SubscriberStatus.UNSUBSCRIBED and before is not SubscriberStatus.UNSUBSCRIBED:
        return "unsubscribe"
    if before is SubscriberStatus.UNSUBSCRIBED and after is SubscriberStatus.ACTIVE:
        return "resubscribe"
    return None
