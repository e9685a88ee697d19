"""Language-model stage, the service: one pass that asks the chat model for the TL;DRs
readers will get and keeps those ``bot.llm.tldr`` lets through.

Run after ingest, never inside a planning pass and never on the loop that answers
unsubscribes (it waits on a model).  Asks the (entry, language) pairs most readers will
get first, within the day's budget; each request is its own failure, tallied by kind;
nothing is held locked while a model answers.  Sends an entry's title, authors and
abstract and a language tag: never anything of a reader.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.candidates import doc_of
from bot.choose.matching import FilterInput
from bot.choose.select import taken_by
from bot.config import Settings
from bot.config.services import LlmConfig
from bot.domain import EntryView
from bot.domain.llm import Tldr
from bot.llm.budget import DayBudget
from bot.llm.client import ChatAnswer, LlmCall, answered
from bot.llm.embedding import EmbeddingPass, embed_papers
from bot.llm.pauses import keep_pause, paused_call
from bot.llm.tldr import tldr_of, tldr_request
from bot.llm.wanted import WantedTldr, wanted_tldrs
from bot.store.engine import transaction
from bot.store.entry_reads import entries_first_seen_between
from bot.store.facts import TLDR_FAILURE_FACT, set_fact
from bot.store.tldrs import add_spending, reader_filters, save_tldr, without_tldr
from bot.taste.embedded_models import refresh_embedding_models

RECENT = timedelta(days=2)  # entries first seen this long ago or less are the ones readers will get next


@dataclass
class TldrPass:
    """What one pass did: shown by the command, logged once by the daemon."""

    wanted: int = 0  # (entry, language) pairs readers will get that had no TL;DR
    written: int = 0
    refused: int = 0  # answered, but nothing of the answer may be shown
    over_budget: int = 0  # left for another day
    skipped: int = 0  # not sent: the model asked for a pause
    failures: Counter[str] = field(default_factory=Counter)

    def failure_words(self) -> str:
        """ "3 timeout, 1 busy (429)": the failed requests by kind, most first."""
        return ", ".join(f"{count} {kind}" for kind, count in self.failures.most_common())

    def outcomes(self) -> dict[str, int]:
        """Requests and pairs by what became of them: for the metric and the log line."""
        counted = {"written": self.written, "refused": self.refused, "over budget": self.over_budget}
        return counted | {"paused": self.skipped} | dict(self.failures)


def write_tldrs(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    now: datetime,
    call: LlmCall | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> TldrPass:
    """Ask for the TL;DRs of the recent entries readers will get, most read first; a
    *keep_going* that turns false (the daemon stopping) ends the pass between requests."""
    done = TldrPass()
    llm = settings.llm
    if not (llm.base_url and llm.chat_model):
        return done
    with factory() as session:
        wanted = _wanted(session, llm, now)
        budget = DayBudget.today(session, llm, now.date())
    done.wanted = len(wanted)
    call = call or paused_call(factory, llm, now)
    budget.follow(call)

    def admit(_: object) -> bool:
        if budget.admit():
            return True
        done.over_budget += 1
        return False

    def ask(pair: tuple[WantedTldr, EntryView, FilterInput]) -> ChatAnswer | None:
        item, view, doc = pair
        content = view.content
        body = tldr_request(
            llm.chat_model, title=content.title, authors=content.authors, abstract=doc.summary, language=item.language
        )
        return call.chat(body)

    try:
        for (item, _, _), answer in answered(
            wanted, ask, concurrency=llm.concurrency, admit=admit, keep_going=keep_going
        ):
            spent = budget.settle(call)
            line = tldr_of(answer.text) if answer else None
            with transaction(factory) as session:
                add_spending(session, now.date(), *spent)
                if line is not None:
                    done.written += save_tldr(session, item.entry_id, Tldr(line, item.language, llm.chat_model, now))
            done.refused += answer is not None and line is None
    finally:
        call.close()
    keep_pause(factory, llm, call, now)
    done.skipped, done.failures = call.skipped, call.failures
    if done.failures:
        with transaction(factory) as session:
            set_fact(session, TLDR_FAILURE_FACT, f"{now:%Y-%m-%d %H:%M} UTC: {done.failure_words()}")
    return done


def _wanted(session: Session, llm: LlmConfig, now: datetime) -> list[tuple[WantedTldr, EntryView, FilterInput]]:
    """The (entry, language) pairs to ask for, most read first, each with its entry.  Only
    entries still without a TL;DR in some language are matched against the readers'
    filters: a pass that finds every one written costs a query per language."""
    views = {view.id: view for view in entries_first_seen_between(session, now - RECENT, now)}
    missing = {
        (entry_id, language) for language in llm.languages for entry_id in without_tldr(session, list(views), language)
    }
    asked = sorted({entry_id for entry_id, _ in missing})
    readers = reader_filters(session, llm.languages[0]) if asked else []
    taken = taken_by({text for text, _, _ in readers}, [views[entry_id] for entry_id in asked])
    wanted = [
        item
        for item in wanted_tldrs(taken, readers, offered=llm.languages)
        if (item.entry_id, item.language) in missing
    ]
    docs = {entry_id: doc_of(views[entry_id]) for entry_id in {item.entry_id for item in wanted}}
    return [(item, views[item.entry_id], docs[item.entry_id]) for item in wanted]


def ask_the_model(
    factory: sessionmaker[Session], settings: Settings, *, now: datetime, keep_going: Callable[[], bool]
) -> tuple[TldrPass, EmbeddingPass]:
    """The daemon's pass: the TL;DRs readers will get, then the papers to embed and the
    readers' models on them (each part only when its model is named)."""
    tldrs = write_tldrs(factory, settings, now=now, keep_going=keep_going)
    embedded = embed_and_train(factory, settings, now=now, keep_going=keep_going)
    return tldrs, embedded


def embed_and_train(
    factory: sessionmaker[Session], settings: Settings, *, now: datetime, keep_going: Callable[[], bool] = lambda: True
) -> EmbeddingPass:
    """The recent entries and the library papers embedded, then the model of each reader
    whose papers or ratings changed trained on them (``bot.taste.embedded_models``)."""
    embedded = embed_papers(factory, settings, now=now, since=now - RECENT, keep_going=keep_going)
    if settings.llm.embedding_model and keep_going():
        embedded.models = refresh_embedding_models(factory, settings.llm.embedding_model, now)
    return embedded
