"""Plan stage, what a challenger's order comes from (``bot.plan.challenger``): an outside
ranker over HTTP (``OutsideRanker``), or each reader's model on the stored embeddings
(``EmbeddingRanker``), so that team-draft interleaving and the readers' ratings judge
either against the built-in (TF-IDF) order the same way.

A scorer reads the store only in ``read``, in the planner's thread before a batch is
asked about; ``scores`` runs in the challenger's own thread on what was read.  Nothing
is asked of a model and nothing trained here: a reader's model on the embeddings is
trained beside the embedding pass and stored, and a reader without one, or whose
candidates are not all embedded yet (the embedding service down), keeps the built-in
order.  Never renders or sends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from bot.domain.rankers import RankerCandidate, RankerReader, RankerScore
from bot.rankers.protocol import batches
from bot.rankers.ranker_call import RankerCall
from bot.store.embeddings import embeddings_of, models_of
from bot.store.entry_reads import keys_of

EMBEDDINGS = "embeddings"  # the embeddings' name in interleavings and `rankers report`
EMBEDDING_HOLD_SECONDS = 60.0  # the digests' wait for the models: training, not a network


class Scorer(Protocol):
    """What the challenger asks for a batch of readers' orders."""

    @property
    def name(self) -> str: ...  # in interleavings and reports

    @property
    def hold_seconds(self) -> float: ...  # how long a held digest may wait for its order

    @property
    def failure(self) -> str | None: ...  # why this pass goes on without it

    @property
    def ranked(self) -> int: ...

    @property
    def skipped(self) -> int: ...  # readers left in the built-in order

    def read(self, factory: sessionmaker[Session], asked: Mapping[int, RankerReader]) -> None: ...

    def scores(
        self, candidates: Mapping[int, RankerCandidate], readers: Sequence[RankerReader]
    ) -> dict[str, dict[int, RankerScore]]: ...

    def close(self) -> None: ...


@dataclass
class OutsideRanker:
    """The outside ranker at ``ranker.url``: its requests, ``per_request`` readers each."""

    call: RankerCall
    name: str
    hold_seconds: float
    per_request: int

    @property
    def failure(self) -> str | None:
        return self.call.failure

    @property
    def ranked(self) -> int:
        return self.call.ranked

    @property
    def skipped(self) -> int:
        return self.call.skipped

    def read(self, factory: sessionmaker[Session], asked: Mapping[int, RankerReader]) -> None:
        """Nothing: the ranker is sent what the challenger read."""

    def scores(
        self, candidates: Mapping[int, RankerCandidate], readers: Sequence[RankerReader]
    ) -> dict[str, dict[int, RankerScore]]:
        scores: dict[str, dict[int, RankerScore]] = {}
        for batch in batches(readers, self.per_request):
            scores.update(self.call.scores(candidates, batch) or {})
        return scores

    def close(self) -> None:
        self.call.close()


@dataclass
class EmbeddingRanker:
    """Each reader's model on the embeddings *model* made, as stored (trained beside the
    embedding pass, ``bot.taste.embedded_models``): a dot product a candidate."""

    model: str
    name: str = EMBEDDINGS
    hold_seconds: float = EMBEDDING_HOLD_SECONDS
    failure: str | None = None  # never set: a reader without a model or vectors is only skipped
    ranked: int = 0
    skipped: int = 0  # readers left in the built-in order: no model yet, or entries not embedded
    _models: dict[str, tuple[bytes, float]] = field(default_factory=dict)  # reader id -> weights, intercept
    _vectors: dict[int, bytes] = field(default_factory=dict)  # entry id -> vector

    def read(self, factory: sessionmaker[Session], asked: Mapping[int, RankerReader]) -> None:
        """The models of the batch's readers and the vectors of their candidates."""
        with factory() as session:
            found = models_of(session, list(asked), self.model)
            self._models.update((asked[sid].reader, weights) for sid, weights in found.items())
            ids = {e for r in asked.values() for e in r.candidates} - self._vectors.keys()
            keys = keys_of(session, sorted(ids))
            vectors = embeddings_of(session, list(keys.values()), self.model)
        self._vectors.update((e, vectors[k]) for e, k in keys.items() if k in vectors)

    def scores(
        self, candidates: Mapping[int, RankerCandidate], readers: Sequence[RankerReader]
    ) -> dict[str, dict[int, RankerScore]]:
        scores: dict[str, dict[int, RankerScore]] = {}
        for reader in readers:
            found = self._reader_scores(reader)
            if found is None:
                self.skipped += 1
            else:
                scores[reader.reader] = found
                self.ranked += 1
        return scores

    def _reader_scores(self, reader: RankerReader) -> dict[int, RankerScore] | None:
        """The reader's model's score of each candidate; None without a model, or when a
        candidate has no vector of the model's width."""
        from bot.taste.embedded import stored_scores  # only when embeddings rank (the taste extra)

        model = self._models.get(reader.reader)
        if model is None:
            return None
        # A row a restore brings is outside bytes: what is no model's or vector's leaves the
        # reader in the built-in order.
        found = stored_scores(model[0], model[1], [self._vectors.get(e, b"") for e in reader.candidates])
        if found is None:
            return None
        return {e: RankerScore(s) for e, s in zip(reader.candidates, found, strict=True)}

    def close(self) -> None:
        """Nothing held: the models and vectors go with the pass."""
