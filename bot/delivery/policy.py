"""Delivery stage, the retry and bounce policy: what one send's outcome does to its
digest and to its subscriber.  Pure: no clock, no store, no network (the jitter's
random source can be given).  ``smtp.classify`` says what a reply means; this says
what to do about it; ``loop`` records it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.config import SmtpConfig
from bot.delivery.smtp import Outcome, SendResult
from bot.domain import DigestState


def backoff_seconds(attempt: int, config: SmtpConfig, rng: random.Random | None = None) -> float:
    """Exponential backoff with full jitter in its upper half: base*2^(n-1) capped, times [0.5, 1)."""
    ceiling = min(config.retry_max_seconds, config.retry_base_seconds * 2.0 ** max(attempt - 1, 0))
    return ceiling * (0.5 + 0.5 * (rng or random).random())


@dataclass(frozen=True, slots=True)
class NextState:
    """A digest's state after one attempt, and whether its subscriber's address bounced."""

    state: DigestState
    retry_at: datetime | None
    error: str | None
    bounce: bool


def next_state(
    result: SendResult, attempts: int, config: SmtpConfig, now: datetime, rng: random.Random | None = None
) -> NextState:
    """*attempts* counts the attempt that gave *result*.  Sent on 250; unknown when the
    whole message went out and no reply was seen (never retried: the server may have it);
    a temporary failure waits and retries until ``smtp.max_attempts``; anything else
    fails, and a permanent reply with one of ``smtp.bounce_codes`` counts as a bounce of
    the address."""
    if result.outcome is Outcome.SENT:
        return NextState(DigestState.SENT, None, None, bounce=False)
    error = f"attempt {attempts}: {result.detail}"
    if result.outcome is Outcome.UNKNOWN:
        return NextState(DigestState.UNKNOWN, None, error, bounce=False)
    if result.outcome is Outcome.TEMPORARY and attempts < config.max_attempts:
        retry_at = now + timedelta(seconds=backoff_seconds(attempts, config, rng))
        return NextState(DigestState.RETRY_WAIT, retry_at, error, bounce=False)
    bounce = result.outcome is Outcome.PERMANENT and result.code in config.bounce_codes
    return NextState(DigestState.FAILED, None, error, bounce=bounce)
