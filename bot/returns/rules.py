"""Returned mail, the rules: what one more bounce, complaint or unsubscribe mail does
to a subscriber's status.  Pure; the service counts, the store records.

- a complaint or an unsubscribe mail unsubscribes at once;
- hard bounces since the last ``subscribers resume`` reach ``smtp.bounce_threshold``:
  bounced;
- ``inbox.soft_bounce_limit`` soft bounces within ``inbox.soft_bounce_days``: bounced;
- a delay notice changes nothing.

Only an active or paused subscriber becomes bounced (a paused address that bounces
would bounce again on resume); nobody is ever made active here.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.domain import ReturnKind, SubscriberStatus


@dataclass(frozen=True, slots=True)
class Limits:
    hard_bounces: int  # smtp.bounce_threshold
    soft_bounces: int  # inbox.soft_bounce_limit (within inbox.soft_bounce_days)


def status_after(kind: ReturnKind, status: SubscriberStatus, count: int, limits: Limits) -> SubscriberStatus | None:
    """The status a subscriber in *status* gets from one more event of *kind*, of which
    they now have *count* that count (this one included); None when nothing changes."""
    if kind in (ReturnKind.COMPLAINT, ReturnKind.UNSUBSCRIBE):
        return None if status is SubscriberStatus.UNSUBSCRIBED else SubscriberStatus.UNSUBSCRIBED
    if not status.subscribed:
        return None
    if kind is ReturnKind.HARD and count >= limits.hard_bounces:
        return SubscriberStatus.BOUNCED
    if kind is ReturnKind.SOFT and count >= limits.soft_bounces:
        return SubscriberStatus.BOUNCED
    return None
