"""Taste stage, for people: what a subscriber's model says of entries, as ``preview``
and ``tags test`` show it: each candidate's taste score, the blended order and the why
line, made by the planner's own ``bot.taste.ranking``.  Reads the store; never
writes, never trains.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from bot.choose.candidates import Candidate
from bot.choose.filters import uses_liked
from bot.domain import EntryView, Subscriber
from bot.store.taste import any_models
from bot.taste import ranking_installed, say_extra_missing

if TYPE_CHECKING:
    from bot.taste.ranking import ReaderTaste


@dataclass(frozen=True, slots=True)
class Scored:
    candidate: Candidate
    score: float | None  # the model's taste score; None without a model
    why: str


def models_usable(session: Session) -> bool:
    """Whether anyone has a model and the taste extra is there to use it (numpy and
    scipy are loaded only then); a model without the extra is said once in the log."""
    if not any_models(session):
        return False
    if ranking_installed():
        return True
    say_extra_missing()
    return False


def reader_taste(
    session: Session, subscriber: Subscriber, start: datetime | None, window: list[EntryView]
) -> ReaderTaste | None:
    """The subscriber's model over *window* (entries first seen from *start*), or None
    when they have none (numpy and scipy are loaded only when someone has one)."""
    if not models_usable(session):
        return None
    from bot.taste.ranking import TastePass

    taste = TastePass.open(session)
    model = taste.models(session, [subscriber.id]).get(subscriber.id) if taste is not None else None
    return taste.reader(model, start, window, subscriber.id) if taste is not None and model is not None else None


def liked_for(filter_text: str, taste: ReaderTaste | None, threshold: float) -> frozenset[int] | None:
    """What ``liked`` matches for a filter that names it (nothing without a model);
    None for a filter that does not."""
    if not uses_liked(filter_text):
        return None
    return taste.liked(threshold) if taste is not None else frozenset()


def scored(
    taste: ReaderTaste | None,
    candidates: Sequence[Candidate],
    interest_of: Callable[[Candidate], str] | None = None,
) -> list[Scored]:
    """*candidates* in the order the subscriber's digest would have them, with taste
    scores and why lines; *interest_of*: the interest each goes in, for a reader of
    several (``bot.plan.sections.Sectioner.interest_of``), whose model scores it."""
    if taste is None:
        return [Scored(c, None, c.explanation.why()) for c in candidates]
    ordered = taste.rerank(list(candidates), interest_of)
    whys = taste.why_lines(ordered, [c.explanation.why() for c in ordered])
    place = interest_of if interest_of is not None and taste.by_interest else (lambda _c: "")
    return [Scored(c, taste.score_of(c.entry.id, place(c)), why) for c, why in zip(ordered, whys, strict=True)]
