"""Plan stage, the challenger: a batch's digests interleaved with an outside ranker's
order (``ranker.url``; ``bot.rankers``, docs/rankers.md) or, without one, with the
order of each reader's model on the stored embeddings (``llm.embedding_model``;
``bot.plan.scorers``, docs/llm.md), which is judged the same way.

The ranker orders what the filter and the built-in ranking chose for a digest; it
cannot bring in an entry they left out, so what rolls into the next digest is the
same with or without it.  It is never asked while a lock is held: in the batch's
transaction the digests of readers it will be asked about (those with a library or
ratings; mailed digests only) are written held back (``hold``); after the commit it
is asked (``ask``), one request per ``readers_per_request`` readers with each of their
candidates once, from one thread of its own while the planner goes on with the next
batch (the ranker's time overlaps the planner's); then one short transaction pins on
each digest it scored a team-draft interleaving of the built-in order and its own
over the digest's body (per section, the coin seeded by the reader and the day; with
the positions each ranker placed: ``Interleaving``) and lets every held digest go
(``settle``, before the next batch is asked about and at the end of the pass).  When
the ranker fails, those readers and the rest of the pass keep the built-in order; when
the planner dies in between, the held digests go in the built-in order once their hold
ends.  The thread never touches the store.  Never renders or sends.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.filters import sections_of
from bot.config import Settings
from bot.domain import DigestState, EntryView
from bot.domain.rankers import Interleaving, RankerCandidate, RankerReader, RankerScore
from bot.plan.report import PlanReport
from bot.plan.scorers import EmbeddingRanker, OutsideRanker, Scorer
from bot.rankers.interleave import team_draft
from bot.rankers.protocol import reader_id
from bot.rankers.ranker_call import RankerCall
from bot.store.engine import transaction
from bot.store.entry_reads import entries_by_ids
from bot.store.facts import RANKER_FAILURE_FACT, set_fact
from bot.store.feedback import newest_feedback_of
from bot.store.interleaved import interleave_held, release_held
from bot.store.ledger import NewDigest
from bot.store.library import newest_papers_of
from bot.taste import ranking_installed

SUMMARY_CHARACTERS = 2000  # of a candidate's summary sent: enough to rank by, bounded per request
HOLD_MARGIN_SECONDS = 60  # a held digest waits this beyond the ranker's time, should its planner die


@dataclass
class Challenger:
    """An outside ranker's part in one planning pass."""

    settings: Settings
    key: bytes  # the store's signing key: readers' ids for the ranker are made with it
    scorer: Scorer  # the outside ranker, or the readers' models on embeddings
    asked: dict[int, RankerReader] = field(default_factory=dict)  # this batch's, by subscriber id
    _pool: ThreadPoolExecutor | None = None  # one thread: the requests about one batch at a time
    _pending: _Asked | None = None  # the batch whose answer is awaited
    _known: dict[int, RankerCandidate] = field(default_factory=dict)  # candidates read so far this pass

    @classmethod
    def open(cls, settings: Settings, key: bytes) -> Challenger | None:
        """The outside ranker when ``ranker.url`` names one, else the embeddings when
        ``llm.embedding_model`` does (and the taste extra is there to train on them);
        None for neither: the built-in order alone."""
        ranker = settings.ranker
        if not ranker.url:
            if settings.llm.embedding_model and ranking_installed():
                return cls(settings, key, EmbeddingRanker(settings.llm.embedding_model))
            return None
        outside = OutsideRanker(
            RankerCall(ranker.url, ranker), ranker.name, ranker.pass_seconds, ranker.readers_per_request
        )
        return cls(settings, key, outside)

    def hold(self, session: Session, choices: list[NewDigest], now: datetime) -> list[NewDigest]:
        """*choices* with the mailed digests of readers the ranker will be asked about
        held back (``NewDigest.not_before``) until it has had its time: read in the
        batch's transaction, which is not kept waiting for the ranker."""
        self.asked = self._readers(session, [d for d in choices if d.entries and d.state is DigestState.QUEUED])
        until = now + timedelta(seconds=self.scorer.hold_seconds + HOLD_MARGIN_SECONDS)
        return [replace(d, not_before=until) if d.subscriber_id in self.asked else d for d in choices]

    def ask(self, factory: sessionmaker[Session], written: Sequence[tuple[int, NewDigest]]) -> None:
        """After the batch's transaction, with no lock held: send the ranker the readers
        of the batch's held digests.  It answers while the planner goes on with the next
        batch; ``settle`` waits for that answer (at most one is awaited at a time)."""
        held = [
            (digest_id, d) for digest_id, d in written if d.not_before is not None and d.subscriber_id in self.asked
        ]
        if not held:
            return
        readers = [self.asked[d.subscriber_id] for _, d in held]
        wanted = {e for r in readers for e in r.candidates}
        if unread := wanted - self._known.keys():  # the day's entries recur from batch to batch
            with factory() as session:
                self._known.update(_candidates(entries_by_ids(session, sorted(unread))))
        candidates = {e: self._known[e] for e in wanted}
        self.scorer.read(factory, {d.subscriber_id: self.asked[d.subscriber_id] for _, d in held})
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ranker")
        self._pending = _Asked(held, dict(self.asked), self._pool.submit(self._scores, candidates, readers))

    def settle(self, factory: sessionmaker[Session], now: datetime, report: PlanReport) -> None:
        """Wait for the answer ``ask`` awaits, if any (bounded by the ranker's limits);
        in one short transaction, interleave the digests it scored and let every held
        digest of that batch go."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        scores = pending.answer.result()
        report.ranker_failure = self.scorer.failure
        report.ranker_ranked, report.ranker_skipped = self.scorer.ranked, self.scorer.skipped
        drafts = [
            (digest_id, self._interleaved(d, theirs))
            for digest_id, d in pending.held
            if (theirs := scores.get(pending.readers[d.subscriber_id].reader)) is not None
        ]
        with transaction(factory) as session:
            interleave_held(session, drafts, now=now)
            release_held(session, [digest_id for digest_id, _ in pending.held], now=now)
            if self.scorer.failure is not None:  # for `stats`: the last pass it failed, and why
                set_fact(session, RANKER_FAILURE_FACT, f"{now:%Y-%m-%d %H:%M} UTC: {self.scorer.failure}")

    def close(self, factory: sessionmaker[Session], now: datetime, report: PlanReport) -> None:
        """The end of the pass: the last answer settled, the request thread and its connection gone."""
        self.settle(factory, now, report)
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.scorer.close()

    def _scores(
        self, candidates: Mapping[int, RankerCandidate], readers: Sequence[RankerReader]
    ) -> dict[str, dict[int, RankerScore]]:
        """In the request thread: every request about *readers*; never touches the store."""
        return self.scorer.scores(candidates, readers)

    def _readers(self, session: Session, digests: Sequence[NewDigest]) -> dict[int, RankerReader]:
        ranker = self.settings.ranker
        ids = [d.subscriber_id for d in digests]
        papers = newest_papers_of(session, ids, ranker.library_papers)
        rated = newest_feedback_of(session, ids, ranker.ratings)
        return {
            d.subscriber_id: RankerReader(
                reader_id(self.key, self.scorer.name, d.subscriber_id),
                tuple(p.entry_id for p in d.entries),
                library=tuple(papers.get(d.subscriber_id, ())),
                ratings=tuple(rated.get(d.subscriber_id, ())),
                interests=tuple(s.name for s in sections_of(d.filter)) if d.filter else (),
            )
            for d in digests
            if d.subscriber_id in papers or d.subscriber_id in rated
        }

    def _interleaved(self, digest: NewDigest, theirs: Mapping[int, RankerScore]) -> Interleaving:
        coin = random.Random(f"{digest.subscriber_id}:{digest.local_date.isoformat()}")
        sections: dict[str | None, dict[int, int]] = {}  # entry -> its position in the body
        for position, item in enumerate(digest.entries):  # sections in the order they come, each drafted alone
            sections.setdefault(item.section, {})[item.entry_id] = position
        order: list[int] = []
        placed: set[int] = set()
        for at in sections.values():
            ours = list(at)
            ranked = sorted(ours, key=lambda entry: -theirs[entry].score)  # stable: ties keep our order
            for entry, team in team_draft(ours, ranked, len(ours), coin):
                order.append(at[entry])
                if team:
                    placed.add(at[entry])
        return Interleaving(self.scorer.name, tuple(order), frozenset(placed))


@dataclass(frozen=True)
class _Asked:
    """A batch's held digests, its readers as sent (by subscriber id), and the answer to come."""

    held: list[tuple[int, NewDigest]]
    readers: dict[int, RankerReader]
    answer: Future[dict[str, dict[int, RankerScore]]]


def _candidates(views: Sequence[EntryView]) -> dict[int, RankerCandidate]:
    return {
        view.id: RankerCandidate(
            view.id,
            view.content.title,
            view.content.authors,
            view.content.summary[:SUMMARY_CHARACTERS],
            tuple(view.tags),
        )
        for view in views
    }
