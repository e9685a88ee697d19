"""Taste stage, ranking: what the planner asks of the models in one planning pass.

A subscriber without a model keeps the filter's order exactly.  With one, candidates
are ordered by the blend

    relevance score + BLEND × taste score

(``matching.explain``'s score: 3 for a title hit, 1 for a summary hit; the taste score
is the linear model's margin scaled so that 0 is a typical entry of the store and 1 a
typical paper of the reader's, ``bot.taste.model.score``),
ties keeping the filter's order; and each chosen entry close enough to a library
paper says so in its why line.  An entry whose score is above the subscriber's
threshold is ``liked`` (the filter atom).  A reader of several interests with a model
of an interest (``bot.taste.interests``) has the entries of that interest ordered by
its score instead.  Each window's vectors are made once a pass, shared by every
subscriber with that window; each subscriber's scores once.
Reads the store only through ``open`` and ``models``; never writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np
from scipy.sparse import csr_matrix
from sqlalchemy.orm import Session

from bot.choose.candidates import Candidate
from bot.domain import EntryView, match_text
from bot.store.ledger import Planned
from bot.store.taste import any_models, interest_models_of, latest_vocabulary, models_of
from bot.taste import CLOSE_TO
from bot.taste.features import Vocabulary, text_of, vectors, vocabulary_of
from bot.taste.model import BLEND, Model, model_of, nearest, score

EVERYTHING = "matches everything"
TITLE_SHOWN = 90  # characters of a library paper's title in a why line


class TastePass:
    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        # Per window start: the window (to know it is still the same list), its rows, and each entry's row.
        self.windows: dict[datetime | None, tuple[list[EntryView], csr_matrix, dict[int, int]]] = {}
        self.interests: dict[int, dict[str, Model]] = {}  # the interest models of the readers of ``models``

    @classmethod
    def open(cls, session: Session) -> TastePass | None:
        """None when no subscriber has a model: planning goes on as without this stage."""
        if not any_models(session):
            return None
        found = latest_vocabulary(session)
        return cls(vocabulary_of(found)) if found is not None else None

    def models(self, session: Session, subscriber_ids: Sequence[int]) -> dict[int, Model]:
        """Each subscriber's model of all they keep and rate; their interests' models
        are kept for ``reader`` until the next call."""
        self.interests = {  # this batch's only: the pass holds one batch of models at a time
            sid: {name: model_of(model) for name, model in kept.items()}
            for sid, kept in interest_models_of(session, subscriber_ids, self.vocabulary.id).items()
        }
        return {sid: model_of(kept) for sid, kept in models_of(session, subscriber_ids, self.vocabulary.id).items()}

    def _rows(self, start: datetime | None, window: list[EntryView]) -> tuple[csr_matrix, dict[int, int]]:
        cached = self.windows.get(start)
        if cached is None or cached[0] is not window:
            texts = [text_of(e.content.title, match_text(e.content.summary, e.content.extra)) for e in window]
            cached = (window, vectors(texts, self.vocabulary), {e.id: i for i, e in enumerate(window)})
            self.windows[start] = cached
        return cached[1], cached[2]

    def reader(
        self, model: Model, start: datetime | None, window: list[EntryView], subscriber_id: int | None = None
    ) -> ReaderTaste:
        """One subscriber's models over their window: each entry's scores, computed once."""
        rows, positions = self._rows(start, window)
        interests = self.interests.get(subscriber_id, {}) if subscriber_id is not None else {}
        by_interest = {name: score(kept, rows) for name, kept in interests.items()}
        return ReaderTaste(model, rows, positions, score(model, rows), by_interest)


class ReaderTaste:
    """What one subscriber's models say of the entries of their window."""

    def __init__(
        self,
        model: Model,
        rows: csr_matrix,
        positions: dict[int, int],
        scores: np.ndarray,
        by_interest: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.model, self.rows, self.positions, self.scores = model, rows, positions, scores
        self.by_interest = by_interest or {}

    def score_of(self, entry_id: int, interest: str = "") -> float:
        """The entry's score by the model of *interest* when it has one, else by the reader's."""
        return float(self.by_interest.get(interest, self.scores)[self.positions[entry_id]])

    def liked(self, threshold: float) -> frozenset[int]:
        """The window's entries scored above *threshold* (what ``liked`` matches)."""
        ids = list(self.positions)
        return frozenset(ids[i] for i in np.flatnonzero(self.scores > threshold).tolist())

    def rerank(
        self, candidates: list[Candidate], interest_of: Callable[[Candidate], str] | None = None
    ) -> list[Candidate]:
        """*candidates* in the blended order (ties keep the filter's order); each scored
        by the model of the interest *interest_of* puts it in, when that has one."""
        positions, scores = self.positions, self.scores
        if interest_of is None or not self.by_interest:
            blended = {c.entry.id: blend(c.explanation.score, float(scores[positions[c.entry.id]])) for c in candidates}
        else:
            blended = {
                c.entry.id: blend(c.explanation.score, self.score_of(c.entry.id, interest_of(c))) for c in candidates
            }
        return sorted(candidates, key=lambda c: -blended[c.entry.id])

    def why_lines(self, chosen: Sequence[Candidate], whys: Sequence[str]) -> list[str]:
        """Each chosen entry's why line, naming the library paper it is closest to."""
        if not chosen:
            return list(whys)
        titles = nearest(self.model, self.rows[np.asarray([self.positions[c.entry.id] for c in chosen])])
        return [why_line(why, title) for why, title in zip(whys, titles, strict=True)]

    def planned(self, chosen: Sequence[Candidate], entries: Sequence[Planned]) -> list[Planned]:
        """The chosen entries' body items with the model's score, and why lines that
        name the library paper each is closest to."""
        whys = self.why_lines(chosen, [e.why for e in entries])
        return [
            replace(e, why=line, taste=round(self.score_of(c.entry.id, e.section or ""), 4))
            for e, c, line in zip(entries, chosen, whys, strict=True)
        ]


def blend(relevance: int, score: float) -> float:
    """The order of a reader with a model: the filter's relevance plus ``BLEND`` × score."""
    return relevance + BLEND * score


def why_line(why: str, title: str | None) -> str:
    """*why*, and the library paper the entry is closest to when there is one."""
    if title is None:
        return why
    shown = title if len(title) <= TITLE_SHOWN else title[: TITLE_SHOWN - 1].rstrip() + "…"
    note = f"{CLOSE_TO}: '{shown}' from your library"
    return note if why == EVERYTHING else f"{why}; {note}"
