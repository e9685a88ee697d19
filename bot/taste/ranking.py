"""Taste stage, ranking: what the planner asks of the models in one planning pass.

A subscriber without a model keeps the filter's order exactly.  With one, candidates
are ordered by the blend

    relevance score + BLEND × model margin

(``filters.explain``'s score: 3 for a title hit, 1 for a summary hit; the margin is
the linear model's signed distance, positive for entries like the reader's papers),
ties keeping the filter's order; and each chosen entry close enough to a library
paper says so in its why line.  Each window's vectors are made once a pass, shared by
every subscriber with that window.  Reads the store only through ``open`` and
``models``; never writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np
from scipy.sparse import csr_matrix
from sqlalchemy.orm import Session

from bot.choose.select import Candidate
from bot.domain import EntryView, match_text
from bot.store.taste import any_models, latest_vocabulary, models_of
from bot.taste.features import Vocabulary, text_of, vectors
from bot.taste.model import BLEND, Model, nearest, score

EVERYTHING = "matches everything"
TITLE_SHOWN = 90  # characters of a library paper's title in a why line


class TastePass:
    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        # Per window start: the window (to know it is still the same list), its rows, and each entry's row.
        self.windows: dict[datetime | None, tuple[list[EntryView], csr_matrix, dict[int, int]]] = {}

    @classmethod
    def open(cls, session: Session) -> TastePass | None:
        """None when no subscriber has a model: planning goes on as without this stage."""
        if not any_models(session):
            return None
        found = latest_vocabulary(session)
        return cls(found[0]) if found is not None else None

    def models(self, session: Session, subscriber_ids: Sequence[int]) -> dict[int, Model]:
        return models_of(session, subscriber_ids, self.vocabulary.id)

    def _rows(self, start: datetime | None, window: list[EntryView]) -> tuple[csr_matrix, dict[int, int]]:
        cached = self.windows.get(start)
        if cached is None or cached[0] is not window:
            texts = [text_of(e.title, match_text(e.summary, e.extra)) for e in window]
            cached = (window, vectors(texts, self.vocabulary), {e.id: i for i, e in enumerate(window)})
            self.windows[start] = cached
        return cached[1], cached[2]

    def rerank(
        self, model: Model, candidates: list[Candidate], start: datetime | None, window: list[EntryView]
    ) -> list[Candidate]:
        """*candidates* (from *window*) in the blended order."""
        if not candidates:
            return candidates
        rows, positions = self._rows(start, window)
        margins = score(model, rows)
        blended = {c.entry.id: c.explanation.score + BLEND * float(margins[positions[c.entry.id]]) for c in candidates}
        return sorted(candidates, key=lambda c: -blended[c.entry.id])

    def why_lines(
        self,
        model: Model,
        chosen: Sequence[Candidate],
        whys: Sequence[str],
        start: datetime | None,
        window: list[EntryView],
    ) -> list[str]:
        """Each chosen entry's why line, naming the library paper it is closest to."""
        if not chosen:
            return list(whys)
        rows, positions = self._rows(start, window)
        titles = nearest(model, rows[np.asarray([positions[c.entry.id] for c in chosen])])
        lines = []
        for why, title in zip(whys, titles, strict=True):
            if title is None:
                lines.append(why)
                continue
            shown = title if len(title) <= TITLE_SHOWN else title[: TITLE_SHOWN - 1].rstrip() + "…"
            note = f"close to: '{shown}' from your library"
            lines.append(note if why == EVERYTHING else f"{why}; {note}")
        return lines
