"""Taste stage, the service: a subscriber's library read from a file, listed and
changed; their feedback ("more like this", "less like this") and threshold (the
models trained on them in ``training``).  Composes ``library``, ``features`` and ``model`` (pure) with
``bot.store.library``, ``bot.store.feedback`` and ``bot.store.taste`` (SQL); never
renders or sends."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.domain import REQUEST_WINDOW, LibraryPaper, RatedEntry, Subscriber
from bot.domain.stored import THRESHOLD_RANGE
from bot.store.consents import count_request
from bot.store.engine import transaction
from bot.store.feedback import feedback_of, remove_feedback, set_feedback, set_threshold
from bot.store.library import add_papers, library_of, remove_papers
from bot.store.taste import (
    modelled_interests,
    taste_counts,
)
from bot.taste import ranking_installed
from bot.taste.interests import MIN_POSITIVES
from bot.taste.library import LibraryRead, read_library
from bot.taste.training import filter_interests

log = logging.getLogger(__name__)
# Taste scores run about from 0 (a typical entry) to 1 (a typical library paper): a
# threshold beyond these would mean nothing (bot.taste.model.score).
MIN_THRESHOLD, MAX_THRESHOLD = THRESHOLD_RANGE


@dataclass(frozen=True, slots=True)
class LibraryImport:
    added: list[LibraryPaper]
    already: int  # papers the library held before
    problems: list[str]  # one line per record that could not be read
    format: str
    over: int = 0  # new papers not added: the library holds its most already


def import_library(
    factory: sessionmaker[Session], subscriber_id: int, data: bytes, now: datetime, *, most: int | None = None
) -> LibraryImport:
    """Add what an export holds to the subscriber's library, up to *most* papers in all
    (``LibraryFileError`` when the file cannot be read at all; bad records are listed,
    the rest is added)."""
    return add_library(factory, subscriber_id, read_library(data), now, most=most)


def add_library(
    factory: sessionmaker[Session], subscriber_id: int, read: LibraryRead, now: datetime, *, most: int | None = None
) -> LibraryImport:
    """Add the papers of an export read already (``bot.web.upload_process``), up to *most*."""
    with transaction(factory) as session:
        added, over = add_papers(session, subscriber_id, read.papers, now, most=most)
    return LibraryImport(added, len(read.papers) - len(added) - over, read.problems, read.format, over)


def upload_allowed(factory: sessionmaker[Session], subscriber_id: int, per_hour: int, now: datetime) -> bool:
    """Count one upload of the subscriber's; False once they made more than *per_hour*
    in the last hour (the file is then not read)."""
    with transaction(factory) as session:
        return count_request(session, f"library:{subscriber_id}", now, since=now - REQUEST_WINDOW) <= per_hour


def library(factory: sessionmaker[Session], subscriber_id: int) -> list[LibraryPaper]:
    with factory() as session:
        return library_of(session, subscriber_id)


def remove_from_library(factory: sessionmaker[Session], subscriber_id: int, keys: list[str]) -> int:
    with transaction(factory) as session:
        return remove_papers(session, subscriber_id, keys)


def give_feedback(
    factory: sessionmaker[Session],
    subscriber_id: int,
    entry_id: int,
    verdict: str | None,
    now: datetime,
    section: str = "",
) -> bool:
    """Record "more" or "less" on an entry shown under the interest *section* ('' in a
    digest of one), or undo (*verdict* None); whether anything changed.  The models
    learn it in the next planning pass."""
    with transaction(factory) as session:
        if verdict is None:
            return remove_feedback(session, subscriber_id, entry_id)
        return set_feedback(session, subscriber_id, entry_id, verdict, now, section)


def feedback(factory: sessionmaker[Session], subscriber_id: int) -> list[RatedEntry]:
    with factory() as session:
        return feedback_of(session, subscriber_id)


@dataclass(frozen=True, slots=True)
class TasteSummary:
    """What the manage page says of a reader's taste."""

    papers: int
    more: int
    less: int
    ranked: bool  # a model ranks their digests
    threshold: float
    installed: bool = True  # the taste extra is installed: a model can be trained
    interests: tuple[str, ...] = ()  # the reader's interests with a model of their own

    @property
    def missing(self) -> int:
        """How many more papers or "more like this" a model needs (0: enough)."""
        return max(0, MIN_POSITIVES - self.papers - self.more)


def taste_summary(factory: sessionmaker[Session], subscriber: Subscriber) -> TasteSummary:
    with factory() as session:
        papers, more, less, ranked = taste_counts(session, subscriber.id)
        modelled = set(modelled_interests(session, subscriber.id)) if ranked else set()
    interests = tuple(
        s.name for s in filter_interests(subscriber.filter) if s.name in modelled
    )  # in the filter's order
    return TasteSummary(papers, more, less, ranked, subscriber.taste_threshold, ranking_installed(), interests)


def set_taste_threshold(factory: sessionmaker[Session], subscriber_id: int, value: float, now: datetime) -> None:
    """The taste score above which the subscriber's entries are ``liked``."""
    if not math.isfinite(value) or not MIN_THRESHOLD <= value <= MAX_THRESHOLD:
        raise ValueError(f"threshold must be a number from {MIN_THRESHOLD} to {MAX_THRESHOLD}")
    with transaction(factory) as session:
        set_threshold(session, subscriber_id, value, now)
