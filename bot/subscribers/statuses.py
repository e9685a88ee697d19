"""Subscriber service: the rules of a reader's status, pure: which changes a reader may
make on their manage page, and which changes are consent events.  Never reads or
writes anything (``subscriptions`` applies them).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.domain import SubscriberStatus


@dataclass(frozen=True, slots=True)
class StatusAction:
    """A status change a reader may make themselves: from which status, to which, and
    what their page then says."""

    before: SubscriberStatus
    after: SubscriberStatus
    said: str


READER_ACTIONS = {
    "pause": StatusAction(SubscriberStatus.ACTIVE, SubscriberStatus.PAUSED, "Paused: no digests until you resume."),
    "resume": StatusAction(
        SubscriberStatus.PAUSED, SubscriberStatus.ACTIVE, "Resumed: your next digest comes as usual."
    ),
    "resubscribe": StatusAction(
        SubscriberStatus.UNSUBSCRIBED, SubscriberStatus.ACTIVE, "Subscribed again: your next digest comes as usual."
    ),
}


def reader_action(action: str, status: SubscriberStatus) -> StatusAction | None:
    """The change a reader of *status* asks for with *action*; None when it is none a
    reader may make now."""
    found = READER_ACTIONS.get(action)
    return found if found is not None and found.before is status else None


def consent_change(before: SubscriberStatus, after: SubscriberStatus) -> str | None:
    """The consent event a status change is (``unsubscribe``, ``resubscribe``), or None
    when it is none (a pause, a bounce): the consent record shows how a reader came to
    be subscribed, and how they stopped."""
    if after is SubscriberStatus.UNSUBSCRIBED and before is not SubscriberStatus.UNSUBSCRIBED:
        return "unsubscribe"
    if before is SubscriberStatus.UNSUBSCRIBED and after is SubscriberStatus.ACTIVE:
        return "resubscribe"
    return None
