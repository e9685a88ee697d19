"""Prometheus metrics and the health check: what the daemon and the subscriber
endpoint report about themselves (prometheus-client, one registry per process).

Counters and timestamps are recorded by the process that did the work; the queue
(digests waiting, due now, the oldest due) is read from the store at each scrape,
so every process reports the same queue.  Never changes anything, and never
labels by subscriber or address: a label per person would leak and grow forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from bot.domain import DeliverReport, DigestState, IngestResult, SourceStatus

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

# From a digest being planned to the SMTP server's 250: seconds for a quiet day, hours
# when a day of a million messages drains or a server asks to retry.
LATENCY_BUCKETS = (1, 5, 15, 60, 300, 900, 1800, 3600, 2 * 3600, 6 * 3600, 12 * 3600, 24 * 3600)

JOBS = ("ingest", "plan", "deliver")


def reply_class(code: int | None) -> str:
    """``2xx``, ``4xx``, ``5xx``, or ``none`` when no reply came (refused, dropped, timed out)."""
    if code is None or not 200 <= code <= 599:
        return "none"
    return f"{code // 100}xx"


class Metrics:
    """The metrics one process records and exposes."""

    def __init__(
        self, factory: sessionmaker[Session] | None = None, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.entries = Counter(
            "digestbot_entries_ingested", "Entries stored by ingest", ["change"], registry=r
        )  # change: new | updated
        self.sources = Counter(
            "digestbot_sources", "Dump files and feed fetches ingested, by outcome", ["status"], registry=r
        )
        self.planned = Counter("digestbot_digests_planned", "Digests planned", registry=r)
        self.outcomes = Counter(
            "digestbot_messages",
            "Digests by what happened to them (sent, retry, failed, cancelled, unknown)",
            ["outcome"],
            registry=r,
        )
        self.bounced = Counter("digestbot_subscribers_bounced", "Subscribers set to bounced by refusals", registry=r)
        self.ranked = Counter(
            "digestbot_ranker_readers",
            "Readers an outside ranker was asked about, by whether it ordered their digest or failed (built-in)",
            ["outcome"],
            registry=r,
        )
        self.tldrs = Counter(
            "digestbot_llm_tldrs",
            "TL;DRs asked of the language model, by outcome (written, refused, over budget, paused, or a failure)",
            ["outcome"],
            registry=r,
        )
        self.embedded = Counter(
            "digestbot_llm_embeddings",
            "Papers given to the embedding model, by outcome (stored, refused, over budget, paused, or a failure)",
            ["outcome"],
            registry=r,
        )
        self.returned = Counter(
            "digestbot_returned_mail", "Messages read from inbox.url, by kind (or 'left')", ["kind"], registry=r
        )
        self.replies = Counter("digestbot_smtp_replies", "SMTP replies to a message, by class", ["class"], registry=r)
        self.latency = Histogram(
            "digestbot_delivery_latency_seconds",
            "From a digest being planned to the SMTP server accepting it",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.last_success = Gauge(
            "digestbot_last_success_timestamp_seconds", "When each job last finished without error", ["job"], registry=r
        )
        self.started = time.time()
        if factory is not None:
            r.register(QueueCollector(factory, clock or (lambda: datetime.now(UTC))))

    def ingested(self, results: Iterable[IngestResult]) -> None:
        for result in results:
            self.sources.labels(result.status.value).inc()
            if result.status is SourceStatus.INGESTED:
                self.entries.labels("new").inc(result.new)
                self.entries.labels("updated").inc(result.updated)
        self.last_success.labels("ingest").set_to_current_time()

    def plan_done(self, planned: int, ranked: int = 0, fell_back: int = 0) -> None:
        self.planned.inc(planned)
        self.ranked.labels("ranked").inc(ranked)
        self.ranked.labels("built-in").inc(fell_back)
        self.last_success.labels("plan").set_to_current_time()

    def model_pass_done(self, tldrs: dict[str, int], embedded: dict[str, int]) -> None:
        for counter, outcomes in ((self.tldrs, tldrs), (self.embedded, embedded)):
            for outcome, count in outcomes.items():
                counter.labels(outcome).inc(count)
        self.last_success.labels("llm").set_to_current_time()

    def delivery_done(self, report: DeliverReport) -> None:
        self.outcomes.labels("cancelled").inc(report.cancelled)
        self.bounced.inc(report.bounced)
        self.last_success.labels("deliver").set_to_current_time()

    def inbox_read(self, kinds: dict[str, int], left: int) -> None:
        for kind, count in kinds.items():
            self.returned.labels(kind).inc(count)
        self.returned.labels("left").inc(left)
        self.last_success.labels("inbox").set_to_current_time()

    def message_done(self, state: DigestState, code: int | None, planned_at: datetime, now: datetime) -> None:
        """One recorded send (``bot.delivery.loop`` calls it as outcomes are written)."""
        outcome = {DigestState.SENT: "sent", DigestState.RETRY_WAIT: "retry", DigestState.UNKNOWN: "unknown"}.get(
            state, "failed"
        )
        self.outcomes.labels(outcome).inc()
        self.replies.labels(reply_class(code)).inc()
        if state is DigestState.SENT:
            self.latency.observe(max(0.0, (now - planned_at).total_seconds()))
        # A run draining a big day takes many minutes; each recorded message shows it is alive.
        self.last_success.labels("deliver").set_to_current_time()

    def last(self, job: str) -> float | None:
        """When *job* last succeeded (seconds since the epoch), None if never."""
        for metric in self.last_success.collect():
            for sample in metric.samples:
                if sample.labels.get("job") == job:
                    return float(sample.value)
        return None

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class QueueCollector(Collector):
    """The digest queue, read from the store when scraped."""

    def __init__(self, factory: sessionmaker[Session], clock: Callable[[], datetime]) -> None:
        self.factory, self.clock = factory, clock

    def collect(self) -> Iterator[Any]:
        from bot.store.queue import count_due, count_unknown, live_counts, oldest_due_at

        now = self.clock()
        with self.factory() as session:
            live, due, oldest = live_counts(session), count_due(session, now), oldest_due_at(session, now)
            unknown = count_unknown(session)
        waiting = GaugeMetricFamily("digestbot_digests_waiting", "Digests not yet final, by state", labels=["state"])
        for state, count in live.items():
            waiting.add_metric([state.value], count)
        yield waiting
        yield GaugeMetricFamily("digestbot_digests_due", "Digests due to be sent now (queue depth)", value=due)
        yield GaugeMetricFamily(
            "digestbot_digests_unknown",
            "Digests that went on the wire with no answer seen (kept, never resent by themselves)",
            value=unknown,
        )
        age = (now - oldest).total_seconds() if oldest is not None else 0.0
        yield GaugeMetricFamily(
            "digestbot_oldest_due_digest_age_seconds", "How long the longest-waiting due digest has been due", value=age
        )


def health(metrics: Metrics, *, jobs: Iterable[str], stale_after: float, now: float | None = None) -> tuple[bool, str]:
    """Whether each of *jobs* succeeded within *stale_after* seconds (a job that never
    ran counts from the process start), and one line per job saying so."""
    at = time.time() if now is None else now
    jobs = list(jobs)
    if not jobs:
        return True, "ok: nothing to keep fresh here (a scheduler standing by)\n"
    lines, healthy = [], True
    for job in jobs:
        last = metrics.last(job)
        age = at - (last if last is not None else metrics.started)
        fresh = age <= stale_after
        healthy = healthy and fresh
        when = f"{age:.0f} s ago" if last is not None else f"never, {age:.0f} s since start"
        lines.append(f"{job}: {'ok' if fresh else 'stale'} (last success {when}; limit {stale_after:.0f} s)")
    return healthy, "\n".join(lines) + "\n"
