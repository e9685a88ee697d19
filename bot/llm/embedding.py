"""Language-model stage, the embedding pass: each recent entry and each library paper
embedded once by ``llm.embedding_model`` and kept (``bot.store.embeddings``).

Run after ingest and every few minutes beside the TL;DR pass, never inside a planning
pass and never on the loop that answers unsubscribes.  Entries come first (the next
digests' candidates), then library papers, a few dozen texts a request, within the
day's budget; a request that fails leaves its papers for the next pass.  Sends a
paper's title and abstract: never anything of a reader (a library paper's text is the
paper's, not who keeps it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain.llm import packed
from bot.llm.budget import DayBudget
from bot.llm.client import LlmCall, answered
from bot.llm.pauses import keep_pause, paused_call
from bot.llm.tldr import MAX_ABSTRACT_CHARS
from bot.store.embeddings import PaperText, entries_to_embed, library_to_embed, save_embeddings
from bot.store.engine import transaction
from bot.store.facts import EMBEDDING_FAILURE_FACT, set_fact
from bot.store.tldrs import add_spending
from bot.taste.embedded_models import EmbeddedModelsReport

TEXTS_PER_REQUEST = 32
TEXTS_PER_PASS = 1024  # the rest waits for the next pass: a pass stays short


@dataclass
class EmbeddingPass:
    """What one pass did: shown by the command, logged once by the daemon."""

    wanted: int = 0  # papers without an embedding by the model, at most TEXTS_PER_PASS
    stored: int = 0
    refused: int = 0  # vectors that are none (empty, all zero, too long)
    over_budget: int = 0  # papers left for another day
    skipped: int = 0  # requests not sent: the model asked for a pause
    failures: Counter[str] = field(default_factory=Counter)
    models: EmbeddedModelsReport | None = None  # the readers' models trained after it

    def outcomes(self) -> dict[str, int]:
        counted = {"stored": self.stored, "refused": self.refused, "over budget": self.over_budget}
        return counted | {"paused": self.skipped} | dict(self.failures)


def paper_text(title: str, abstract: str) -> str:
    """What is embedded of a paper: its title and the start of its abstract."""
    return f"{' '.join(title.split())}\n\n{' '.join(abstract[:MAX_ABSTRACT_CHARS].split())}".strip()


def embed_papers(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    now: datetime,
    since: datetime,
    call: LlmCall | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> EmbeddingPass:
    """Embed the entries first seen since *since*, then the library papers, that the
    model has not; a *keep_going* that turns false ends the pass between requests."""
    done = EmbeddingPass()
    llm = settings.llm
    if not (llm.base_url and llm.embedding_model):
        return done
    with factory() as session:
        wanted = entries_to_embed(session, since, llm.embedding_model, TEXTS_PER_PASS)
        keys = {key for key, _, _ in wanted}  # an entry kept in a library: embedded once
        library = library_to_embed(session, llm.embedding_model, TEXTS_PER_PASS)
        wanted += [paper for paper in library if paper[0] not in keys][: TEXTS_PER_PASS - len(wanted)]
        budget = DayBudget.today(session, llm, now.date())
    done.wanted = len(wanted)
    call = call or paused_call(factory, llm, now)
    budget.follow(call)
    batches = [wanted[start : start + TEXTS_PER_REQUEST] for start in range(0, len(wanted), TEXTS_PER_REQUEST)]

    def admit(batch: list[PaperText]) -> bool:
        if budget.admit():
            return True
        done.over_budget += len(batch)
        return False

    def ask(batch: list[PaperText]) -> list[list[float]] | None:
        return call.embed(llm.embedding_model, [paper_text(title, abstract) for _, title, abstract in batch])

    try:
        for batch, vectors in answered(batches, ask, concurrency=llm.concurrency, admit=admit, keep_going=keep_going):
            _keep(factory, settings, batch, vectors, done, budget.settle(call), now)
    finally:
        call.close()
    keep_pause(factory, llm, call, now)
    done.skipped, done.failures = call.skipped, call.failures
    if done.failures:
        with transaction(factory) as session:
            words = ", ".join(f"{count} {kind}" for kind, count in done.failures.most_common())
            set_fact(session, EMBEDDING_FAILURE_FACT, f"{now:%Y-%m-%d %H:%M} UTC: {words}")
    return done


def _keep(
    factory: sessionmaker[Session],
    settings: Settings,
    batch: list[PaperText],
    vectors: list[list[float]] | None,
    done: EmbeddingPass,
    spent: tuple[int, int],
    now: datetime,
) -> None:
    """What one request answered for *batch* kept, and what it spent counted."""
    kept = []
    for (key, _, _), vector in zip(batch, vectors or (), strict=False):
        stored = packed(vector)
        if stored is None:
            done.refused += 1
        else:
            kept.append((key, stored))
    with transaction(factory) as session:
        add_spending(session, now.date(), *spent)
        save_embeddings(session, kept, settings.llm.embedding_model, now)
    done.stored += len(kept)
