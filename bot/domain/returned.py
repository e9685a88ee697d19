"""Domain types of mail that came back (``bot.returns``): what a returned message is,
whom it names, and its outcome for a subscriber.  Small frozen dataclasses; never
I/O, never the store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class ReturnKind(StrEnum):
    """What a message in the returned-mail inbox is (``bot.returns.classify``)."""

    HARD = "hard"  # a permanent bounce (5.x.x): counts toward smtp.bounce_threshold
    SOFT = "soft"  # a temporary one that gave up (4.x.x, mailbox full): counted over inbox.soft_bounce_days
    DELAYED = "delayed"  # "still trying": recorded, never counted
    COMPLAINT = "complaint"  # an ARF abuse report: unsubscribed at once
    UNSUBSCRIBE = "unsubscribe"  # a mail to the List-Unsubscribe mailto address
    CLEARED = "cleared"  # not a mail: `subscribers resume` cleared a bounce; earlier hard bounces no longer count
    OTHER = "other"  # anything else: left in the mailbox for a person


@dataclass(frozen=True, slots=True)
class Returned:
    """One returned message as ``classify`` reads it: who it names and how (never verified
    here; the store tells whether the digest, token and addresses are anyone's)."""

    kind: ReturnKind
    digest_id: int | None = None  # from a VERP return path whose signature checked out
    token: str | None = None  # an unsubscribe token (the mail, or the original a report quotes)
    addresses: tuple[str, ...] = ()  # the recipients it reports, lower-cased
    status: str = ""  # the enhanced status code, e.g. "5.1.1"
    diagnostic: str = ""  # the server's words (or the complaint's feedback type), one line


@dataclass(frozen=True, slots=True)
class ReturnEvent:
    """A returned message's outcome for one subscriber, as ``subscribers show`` and ``history`` list it."""

    at: datetime
    kind: ReturnKind
    address: str
    status: str
    diagnostic: str
    digest_id: int | None
