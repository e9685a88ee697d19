"""bench/rank.py --challenger: an outside ranker interleaved with the built-in one, and
the readers' verdict (bot.rankers).

The challenger is `bm25` (examples/rankers/bm25/ranker.py, started as a process of its
own) or `random` (a server in this process that scores every candidate at random),
asked over HTTP through ``bot.rankers.ranker_call`` with each reader's library, ratings
and today's entries.  Each reader's digest is the first 10 of a team-draft
interleaving of the built-in order (their model's) and the challenger's; they rate
about half of them as bench/rank.py's readers do, and each rating credits the ranker
that placed the entry.  The simulation prints both rankers' precision@5 a day and,
at the end, the wins, losses and ties of the challenger with the sign test's p-value.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bot.choose.candidates import Candidate
from bot.choose.select import SelectionCache, select_for
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.config.services import RankerConfig
from bot.domain.rankers import BUILT_IN, RankerCandidate, RankerReader, RankerScore
from bot.llm.embedding import embed_papers
from bot.plan.scorers import EmbeddingRanker
from bot.rankers.interleave import Verdict, team_draft, verdict
from bot.rankers.ranker_call import RankerCall
from bot.store.feedback import feedback_of
from bot.store.library import library_of
from bot.taste.embedded_models import refresh_embedding_models
from bot.taste.library_service import give_feedback
from bot.taste.ranking import TastePass
from tests.helpers import example_ranker

SHOWN = 10  # entries of a digest
LIMITS = RankerConfig(answer_seconds=60, pass_seconds=600)


@contextmanager
def challenger(kind: str, seed: int) -> Iterator[str]:
    """The URL of a running challenger of *kind*, stopped at the end."""
    if kind == "bm25":
        with example_ranker() as url:
            yield url
        return
    coin = random.Random(seed)

    class Random(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            readers = [
                {"id": r["id"], "scores": [{"entry": e, "score": coin.random()} for e in r["candidates"]]}
                for r in request["readers"]
            ]
            body = json.dumps({"protocol": request["protocol"], "readers": readers}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Random)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _ranker_readers(session: Any, readers: list[Any], found: dict[int, list[Candidate]]) -> list[RankerReader]:
    return [
        RankerReader(
            f"r{reader.id}",
            tuple(c.entry.id for c in found[reader.id]),
            library=tuple(library_of(session, reader.id)),
            ratings=tuple(feedback_of(session, reader.id)),
        )
        for reader in readers
    ]


Scores = Callable[[dict[int, RankerCandidate], list[RankerReader]], dict[str, dict[int, RankerScore]] | None]


def asking(url: str) -> Scores:
    """The challenger at *url*, asked over HTTP (``bot.rankers.ranker_call``)."""

    def scores(candidates: dict[int, RankerCandidate], asked: list[RankerReader]) -> Any:
        call = RankerCall(url, LIMITS)
        try:
            return call.scores(candidates, asked)
        finally:
            call.close()

    return scores


def rank_day_interleaved(
    factory: Any,
    readers: list[Any],
    liked: Callable[[int, str], bool],
    now: datetime,
    rng: random.Random,
    scorer: Scores,
    verdicts: list[Verdict],
) -> tuple[float, float]:
    """Today's digests, interleaved; the readers' ratings of them.  Precision@5 of the
    built-in order and of the challenger's, averaged over readers.  A reader the
    challenger left out (too few papers) gets the built-in order twice."""
    cache = SelectionCache()
    start = now - timedelta(hours=1)
    with factory() as session:
        taste = TastePass.open(session)
        models = taste.models(session, [r.id for r in readers]) if taste else {}
        found: dict[int, list[Candidate]] = {}
        built_in: dict[int, list[Candidate]] = {}
        for reader in readers:
            found[reader.id] = select_for(session, reader, TagRules(()), as_of=now, cache=cache, start=start)
            model = models.get(reader.id)
            ordered = found[reader.id]
            if model is not None and taste is not None:
                ordered = taste.reader(model, start, cache.entries(session, start, now)).rerank(ordered)
            built_in[reader.id] = ordered
        asked = _ranker_readers(session, readers, found)
    candidates = {
        c.entry.id: RankerCandidate(c.entry.id, c.entry.content.title, c.entry.content.authors, c.entry.content.summary)
        for cs in found.values()
        for c in cs
    }
    scores = scorer(candidates, asked)
    assert scores is not None, "the challenger failed"
    precision: list[tuple[float, float]] = []
    pressed: list[tuple[int, int, str]] = []
    for reader in readers:
        title_of = {c.entry.id: c.entry.content.title for c in found[reader.id]}
        mine = scores.get(f"r{reader.id}", {})
        ours = [c.entry.id for c in built_in[reader.id]]
        theirs = sorted(ours, key=lambda entry: -mine[entry].score) if mine else ours
        hits = [sum(liked(reader.id, title_of[e]) for e in order[:5]) / 5 for order in (ours, theirs)]
        precision.append((hits[0], hits[1]))
        digest = team_draft(ours, theirs, SHOWN, random.Random(f"{reader.id}:{now.date()}"))
        placed_by = {entry: (BUILT_IN, "challenger")[team] for entry, team in digest}
        more: list[int] = []
        less: list[int] = []
        for entry, _ in digest:
            if rng.random() < 0.5:
                (more if liked(reader.id, title_of[entry]) else less).append(entry)
        verdicts.append(verdict(placed_by, more, less, "challenger"))
        pressed += [(reader.id, e, "more") for e in more] + [(reader.id, e, "less") for e in less]
    for reader_id, entry_id, said in pressed:  # after the read: SQLite has one writer
        give_feedback(factory, reader_id, entry_id, said, now)
    return sum(p for p, _ in precision) / len(precision), sum(p for _, p in precision) / len(precision)


READER_SECONDS: list[float] = []  # --embeddings: training a reader's model, each day's mean and slowest


def embedding_scorer(factory: Any, now: datetime, url: str, model: str) -> Scores:
    """The day's new papers and library papers embedded through the product's pass
    (``bot.llm.embedding``) at *url*, the readers' models trained again where their
    papers or ratings changed (``bot.taste.embedded_models``), then scored as a planning
    pass scores them (``bot.plan.scorers.EmbeddingRanker``)."""
    settings = Settings.model_validate({"llm": {"base_url": url, "embedding_model": model, "answer_seconds": 120}})
    done = embed_papers(factory, settings, now=now, since=now - timedelta(days=2))
    assert not done.failures, done.failures
    trained = refresh_embedding_models(factory, model, now)
    if trained.trained:
        READER_SECONDS.extend([trained.seconds / trained.trained, trained.slowest])
    ranker = EmbeddingRanker(model)

    def scores(candidates: dict[int, RankerCandidate], asked: list[RankerReader]) -> dict[str, dict[int, RankerScore]]:
        ranker.read(factory, {int(reader.reader[1:]): reader for reader in asked})
        return ranker.scores(candidates, asked)

    return scores
