"""Channels stage, the rules of a part's and a digest's state: what a verdict on one
part makes of it, and what a channel's digest becomes once its parts were tried.
Pure: no clock, no store, no network (the jitter's random source can be given).

A digest's parts go out in order, and an attempt stops at the first part not posted:
the reader of a room never sees part 3 before part 2.  A part that may have been posted
(unknown) stops the digest for good: nothing posts it or what follows it again by
itself; ``resend`` makes a new digest of the same entries.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.channels.chat_requests import PostVerdict
from bot.config.services import ChannelsConfig
from bot.domain import DigestState
from bot.domain.channel_states import PartState

_AFTER = {
    PostVerdict.POSTED: PartState.SENT,
    PostVerdict.AGAIN: PartState.PENDING,
    PostVerdict.WAIT: PartState.PENDING,
    PostVerdict.REFUSED: PartState.FAILED,
    PostVerdict.UNKNOWN: PartState.UNKNOWN,
}


def part_after(verdict: PostVerdict) -> PartState:
    return _AFTER[verdict]


@dataclass(frozen=True, slots=True)
class DigestAfter:
    state: DigestState
    retry_at: datetime | None = None


def digest_after(
    parts: Sequence[PartState],
    attempt: int,
    config: ChannelsConfig,
    now: datetime,
    wait: float = 0.0,
    rng: random.Random | None = None,
) -> DigestAfter:
    """A channel's digest after its *attempt*-th try left its parts in *parts*; *wait*:
    the seconds a service asked for (429, a Retry-After), else the backoff's."""
    if all(part is PartState.SENT for part in parts):
        return DigestAfter(DigestState.SENT)
    if PartState.UNKNOWN in parts:
        return DigestAfter(DigestState.UNKNOWN)
    if PartState.FAILED in parts or attempt >= config.attempts:
        return DigestAfter(DigestState.FAILED)
    ceiling = min(config.retry_max_seconds, config.retry_base_seconds * 2.0 ** max(attempt - 1, 0))
    backoff = ceiling * (0.5 + 0.5 * (rng or random).random())
    return DigestAfter(DigestState.RETRY_WAIT, now + timedelta(seconds=wait if wait > 0 else backoff))
