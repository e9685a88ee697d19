"""What the daemon's jobs say in its log, and the figures they hand to the metrics
(``bot.run.scheduler``).  Never runs a job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from bot.domain import DeliverReport, IngestResult, SourceStatus
from bot.domain.text import plural
from bot.metrics import Metrics
from bot.plan import PlanReport

if TYPE_CHECKING:
    from bot.llm.embedding import EmbeddingPass
    from bot.llm.model_pass import TldrPass
    from bot.zotero.zotero_pass import ZoteroPass

# The daemon's lines keep the scheduler's logger name, which operators filter by.
log = logging.getLogger("bot.run.scheduler")


def delivery_done(metrics: Metrics, started: float, task: asyncio.Task[DeliverReport]) -> None:
    if task.cancelled():
        return
    if (exc := task.exception()) is not None:
        log.error("delivery stopped by an unexpected error: %s: %s", type(exc).__name__, exc)
        log.debug("delivery stopped", exc_info=exc)
        return
    report = task.result()
    metrics.delivery_done(report)
    if not any(vars(report).values()):
        return
    seconds = max(time.monotonic() - started, 1e-3)
    unusual = [
        f"{count} {words}"
        for count, words in (
            (report.unknown, "unknown"),
            (report.given_back, "given back"),
            (report.unrecorded, "not recorded yet"),
            (report.lost_lease, "left to another worker (this one's lease had run out)"),
        )
        if count
    ]
    log.info(
        "delivered: sent %d, retrying %d, failed %d, bounced %d, cancelled %d%s in %.1f s (%.1f messages/s)",
        report.sent,
        report.retrying,
        report.failed,
        report.bounced,
        report.cancelled,
        "".join(f", {words}" for words in unusual),
        seconds,
        report.sent / seconds,
    )


def log_ingest(results: list[IngestResult]) -> None:
    for result in results:
        if result.status is SourceStatus.FAILED:
            log.warning("ingest failed: %s", result.error)
        elif result.status is SourceStatus.INGESTED:
            log.info(
                "ingested %s: %d entries, %d new, %d updated", result.path, result.entries, result.new, result.updated
            )
        else:
            log.debug("%s: %s", result.path, result.status.value)


def log_planned(report: PlanReport, *, again: bool = False) -> None:
    """What a pass planned: at INFO when it planned a digest or found a day empty, but
    not while an empty day stays open and each pass says the same (*again*)."""
    level = logging.INFO if (report.planned or report.empty) and not again else logging.DEBUG
    log.log(
        level,
        "planned %s (%d with nothing new, %d not due yet)",
        plural(len(report.planned), "digest"),
        report.empty,
        report.not_due,
    )
    if report.unreadable:  # once a pass, with the first of them: the rest are alike
        log.warning(
            "%s left out of planning: a stored setting digestbot never writes (%s); "
            "'digestbot subscribers show' says which, 'subscribers edit' mends it",
            plural(report.unreadable, "reader"),
            report.unreadable_first,
        )
    if report.ranker_failure is not None:  # once a pass: the ranker's part ended at its first failure
        log.warning(
            "the outside ranker failed (%s): %s kept the built-in order",
            report.ranker_failure,
            plural(report.ranker_skipped, "reader"),
        )


def log_model_pass(tldrs: TldrPass, embedded: EmbeddingPass) -> None:
    """One line for each part of a language-model pass that did anything: what became of
    the TL;DR pairs, of the papers to embed, and the readers' models trained on them."""
    for what, count, done in (
        ("TL;DRs", tldrs.wanted, tldrs.outcomes()),
        ("Embeddings", embedded.wanted, embedded.outcomes()),
    ):
        said = [f"{n} {outcome}" for outcome, n in done.items() if n]
        if count or said:
            log.info("%s: %d wanted; %s", what, count, ", ".join(said) or "none asked")
    models = embedded.models
    if models is not None and (models.trained or models.unfitted or models.removed):
        log.info(
            "readers' models on embeddings: %d trained in %.1f s, %d with too few papers embedded, %d removed",
            models.trained,
            models.seconds,
            models.unfitted,
            models.removed,
        )


def log_zotero_pass(done: ZoteroPass) -> None:
    """One line when the pass took asks, wrote saves or synced a library that changed;
    one line a reader whose connection broke."""
    written = done.written
    changed = [s for s in done.synced if not s.unchanged]
    if done.asks or written.saved or written.found or written.waiting or written.given_up or changed:
        log.info(
            "Zotero: %s taken; saves: %d made, %d already there, %d waiting, %d given up; "
            "%d libraries synced (%d unchanged), %s",
            plural(done.asks, "ask"),
            written.saved,
            written.found,
            written.waiting,
            written.given_up,
            len(done.synced),
            len(done.synced) - len(changed),
            plural(done.requests, "request"),
        )
    for synced in done.synced:
        if synced.broken:
            log.warning("Zotero: reader %d: %s", synced.subscriber_id, synced.said())
