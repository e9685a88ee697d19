"""Metrics and health: the queue read from the store (both backends), the health rule,
SMTP reply classes, and /metrics on `digestbot serve` only for the allowed networks.
The daemon's counters are scraped in tests/test_daemon.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import DigestState
from bot.metrics import Metrics, health, reply_class
from bot.web import create_app
from tests.helpers import Server, queue_digests, settings_for


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_queue_is_read_from_the_store(factory: sessionmaker[Session]) -> None:
    now = datetime.now(UTC)
    empty = _samples(Metrics(factory, lambda: now))
    assert empty[("digestbot_digests_due", ())] == 0 and empty[("digestbot_oldest_due_digest_age_seconds", ())] == 0
    queue_digests(factory, 7)  # due a minute ago
    later = now + timedelta(minutes=10)
    found = _samples(Metrics(factory, lambda: later))
    assert found[("digestbot_digests_due", ())] == 7
    assert found[("digestbot_digests_waiting", (("state", "queued"),))] == 7
    assert found[("digestbot_digests_waiting", (("state", "retry_wait"),))] == 0
    assert 600 < found[("digestbot_oldest_due_digest_age_seconds", ())] < 700


def test_outcomes_replies_and_latency_are_counted() -> None:
    metrics = Metrics()
    planned = datetime(2026, 6, 14, 8, tzinfo=UTC)
    metrics.message_done(DigestState.SENT, 250, planned, planned + timedelta(seconds=42))
    metrics.message_done(DigestState.RETRY_WAIT, 451, planned, planned + timedelta(seconds=50))
    metrics.message_done(DigestState.FAILED, None, planned, planned + timedelta(seconds=60))
    found = _samples(metrics)
    assert [found[("digestbot_messages_total", (("outcome", o),))] for o in ("sent", "retry", "failed")] == [1, 1, 1]
    assert [found[("digestbot_smtp_replies_total", (("class", c),))] for c in ("2xx", "4xx", "none")] == [1, 1, 1]
    assert found[("digestbot_delivery_latency_seconds_sum", ())] == 42
    assert found[("digestbot_delivery_latency_seconds_bucket", (("le", "60.0"),))] == 1
    assert [reply_class(c) for c in (250, 421, 554, None, 99, 700)] == ["2xx", "4xx", "5xx", "none", "none", "none"]


def test_health_is_503_worthy_when_a_job_is_stale() -> None:
    metrics = Metrics()
    metrics.started = 1_000.0
    healthy, text = health(metrics, jobs=["plan", "deliver"], stale_after=900, now=1_500.0)
    assert healthy and "never, 500 s since start" in text  # a new process gets the grace period
    assert health(metrics, jobs=["plan"], stale_after=900, now=2_000.0)[0] is False
    metrics.plan_done(3)
    at = metrics.last("plan")
    assert at is not None
    healthy, text = health(metrics, jobs=["plan", "deliver"], stale_after=900, now=at + 100)
    assert not healthy  # deliver never ran, and the process is older than the limit
    assert text.splitlines()[0].startswith("plan: ok") and text.splitlines()[1].startswith("deliver: stale")
    assert health(metrics, jobs=[], stale_after=900, now=at + 10_000)[0]  # a standby keeps nothing fresh


def test_serve_shows_metrics_to_the_allowed_networks_only(factory: sessionmaker[Session], tmp_path: Path) -> None:
    def settings(allow: list[str]) -> Settings:
        return settings_for(tmp_path, web={"signing_key": "k" * 32}, metrics={"allow_from": allow})

    queue_digests(factory, 3)
    with Server(create_app(settings(["127.0.0.0/8"]), factory)) as client:
        scraped = client.get("/metrics")
        assert scraped.status_code == 200
        assert "digestbot_digests_due 3.0" in scraped.text
    with Server(create_app(settings(["10.0.0.0/8"]), factory)) as client:
        refused = client.get("/metrics")
        assert refused.status_code == 404 and "digestbot_" not in refused.text


def test_the_daemons_health_port_answers_503_when_stale() -> None:
    import time

    import httpx

    from bot.run.exporter import Exporter

    metrics = Metrics()
    exporter = Exporter(metrics, "127.0.0.1", 0, jobs=lambda: ["plan"], stale_after=60)
    exporter.start()
    try:
        url = f"http://127.0.0.1:{exporter.port}"
        assert httpx.get(f"{url}/healthz").status_code == 200
        metrics.started = time.time() - 120
        stale = httpx.get(f"{url}/healthz")
        assert stale.status_code == 503 and stale.text.startswith("plan: stale")
        metrics.plan_done(0)
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert httpx.get(f"{url}/metrics").status_code == 200 and httpx.get(f"{url}/x").status_code == 404
    finally:
        exporter.stop()
