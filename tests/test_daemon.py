"""The daemon's event loop delivers and answers signals while dumps are ingested
and digests planned: that work runs in a thread, and a scan stops between files."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.mail.parts import Parts
from bot.run.scheduler import Daemon
from bot.store.sources import list_sources
from bot.tools.sink import free_port
from tests.conftest import ROOT
from tests.helpers import DIGESTBOT, Cli, daemon_env, dump_of_size, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
MB = 1_000_000


async def timed_with_heartbeat(work: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """(seconds *work* took, the longest the event loop went without a 10 ms heartbeat)."""
    loop = asyncio.get_running_loop()
    gaps: list[float] = []
    busy = True

    async def beat() -> None:
        last = loop.time()
        while busy:
            await asyncio.sleep(0.01)
            gaps.append(loop.time() - last)
            last = loop.time()

    beating = asyncio.ensure_future(beat())
    await asyncio.sleep(0)  # the heartbeat has begun: work that never yields shows as one long gap
    start = loop.time()
    await work()
    spent = loop.time() - start
    busy = False
    await beating
    return spent, max(gaps)


def big_dumps(folder: Path, count: int, size: int) -> None:
    folder.mkdir(exist_ok=True)
    for i in range(count):
        path = folder / f"{i:03d}.txt"
        path.write_bytes(dump_of_size(size).replace(b"A study of", f"Dump {i}: a study of".encode()))
        os.utime(path, (1, 1))


@pytest.mark.timing
def test_the_loop_keeps_beating_while_a_big_dump_is_ingested(
    engine: Engine, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    big_dumps(tmp_path / "dumps", 1, 8 * MB)
    settings = settings_for(tmp_path, paths={"dump_dir": str(tmp_path / "dumps")}, watch={"quiet_seconds": 0})

    async def work() -> None:
        daemon = Daemon(factory, Parts(settings, rules=RULES), engine=engine, deliver_jobs=False)
        assert daemon.leadership.try_acquire()
        await daemon.watching.watch()
        await daemon.planning.plan()
        daemon.leadership.release()

    spent, longest_gap = asyncio.run(timed_with_heartbeat(work))
    with factory() as session:
        assert [s.status.value for s in list_sources(session)] == ["ingested"]
    print(f"ingest: {spent:.2f} s, the loop's longest wait {longest_gap:.3f} s")
    # An order, not a latency: the loop beat all through the work (read on the loop, the
    # dump held it for nearly all of it), however slow the machine.
    assert longest_gap < spent / 5, (spent, longest_gap)


def _daemon_env(tmp_path: Path) -> dict[str, str]:
    """A daemon of its own in *tmp_path*: its store, var and dump folder, no wait for a
    quiet folder, and an SMTP port nothing listens on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    return env | {
        "DIGESTBOT_DATABASE__URL": f"sqlite:///{tmp_path / 's.sqlite3'}",
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
        "DIGESTBOT_PATHS__DUMP_DIR": str(tmp_path / "dumps"),
        "DIGESTBOT_WATCH__QUIET_SECONDS": "0",
        "DIGESTBOT_SMTP__PORT": "9",
    }


@pytest.mark.slow
def test_sigterm_stops_the_daemon_between_files(tmp_path: Path) -> None:
    big_dumps(tmp_path / "dumps", 12, 4 * MB)
    env = _daemon_env(tmp_path)
    proc = subprocess.Popen(
        [DIGESTBOT, "-v", "run"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not _sources_stored(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first file is in
        at_signal = _sources_stored(tmp_path)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    # The file being read at the signal, then no other of the twelve.
    assert _sources_stored(tmp_path) <= at_signal + 1 < 12, at_signal


@pytest.mark.slow
def test_sigterm_while_an_interval_watch_reads_a_file_logs_no_traceback(tmp_path: Path) -> None:
    """The watch job APScheduler runs every interval (not the one on becoming leader) is
    reading big files when SIGTERM comes: it ends between files, nothing is cancelled.
    Three files, so that one is being read at the signal however fast this machine
    reads (one file was sometimes read whole before the signal under CI's load)."""
    (tmp_path / "dumps").mkdir()
    env = _daemon_env(tmp_path) | {"DIGESTBOT_WATCH__INTERVAL_SECONDS": "1"}
    proc = subprocess.Popen([DIGESTBOT, "scheduler"], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)  # elected, the folder read once: empty
        big_dumps(tmp_path / "staging", 3, 16 * MB)  # seconds each to read
        for path in sorted((tmp_path / "staging").iterdir()):
            path.replace(tmp_path / "dumps" / path.name)  # whole files only: the watch waits for no quiet
        time.sleep(1.6)  # the next interval's watch is reading them
        at_signal = _sources_stored(tmp_path)
        assert at_signal < 3, "every file was read before the signal: nothing to stop"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "CancelledError" not in stderr, stderr[-2000:]
    assert _sources_stored(tmp_path) <= at_signal + 1  # the file being read, then no other


def _sources_stored(tmp_path: Path) -> int:
    """How far the daemon got, from its store (its stderr is read only at the end)."""
    try:
        with sqlite3.connect(tmp_path / "s.sqlite3", timeout=0.1) as db:
            return int(db.execute("SELECT count(*) FROM sources").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)  # threads, not the store, are in question
def test_the_loop_keeps_beating_while_digests_are_built(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """Rendering a batch of digests runs in a thread too: the sends and signals of the
    loop never wait for a whole batch to be built."""
    from bot.delivery.loop import deliver_now
    from bot.ingest.storing import ingest_bytes
    from bot.plan import plan
    from bot.subscribers.fields import clean_fields
    from bot.subscribers.subscriptions import save
    from bot.tools.sink import Sink, SinkHandler

    day = datetime(2026, 6, 14, 12, tzinfo=UTC)
    with Sink(SinkHandler()) as sink:
        settings = settings_for(tmp_path, smtp={"port": sink.port, "timeout_seconds": 10, "pool_size": 4})
        people = [clean_fields(f"reader{i}@example.org", filter=f'"fusion number {i}" or gpu') for i in range(240)]
        save(factory, settings, people, day - timedelta(days=1))
        ingest_bytes(factory, dump_of_size(MB // 4), name="d.txt", now=day, rules=RULES)
        plan(factory, settings, RULES, now=day, all_due=True)

        async def work() -> None:
            assert (await deliver_now(factory, Parts(settings), clock=lambda: day)).sent == 240

        spent, longest_gap = asyncio.run(timed_with_heartbeat(work))
    print(f"delivery: {spent:.2f} s, the loop's longest wait {longest_gap:.3f} s")
    # Built on the loop, each batch held it for a large part of the whole delivery.
    assert longest_gap < spent / 10, (spent, longest_gap)


def _zone_in_mid_hour() -> tuple[str, int]:
    """A zone whose local time is well inside an hour for the next minutes, and that hour:
    the test's subscribers are due at once and stay on the same local day."""
    for zone in ("UTC", "Asia/Kolkata"):  # Kolkata is 30 minutes off the hour
        local = datetime.now(UTC).astimezone(ZoneInfo(zone))
        if 2 <= local.minute <= 45:
            return zone, local.hour
    raise AssertionError("unreachable: one of two zones 30 minutes apart is mid-hour")


@pytest.mark.slow
def test_a_dump_that_lands_after_the_send_hour_goes_out_that_day(tmp_path: Path, sink) -> None:
    """The daemon in real time: both subscribers' send hour is now, nothing is stored, so
    their day is first empty; a dump lands seconds later and their digests go out."""
    zone, hour = _zone_in_mid_hour()
    folder = tmp_path / "dumps"
    folder.mkdir()
    metrics_port = free_port()
    env = daemon_env(
        tmp_path, "d.sqlite3", folder, sink.port, watch__interval_seconds="1", metrics__listen_port=str(metrics_port)
    )

    def cli(*args: str) -> str:
        return Cli(tmp_path, env, placed=False)(*args).stdout

    for who in ("ada", "grace"):
        cli("subscribers", "add", f"{who}@example.org", "--tz", zone, "--hour", str(hour))
    database = tmp_path / "d.sqlite3"
    # No -v: a daemon logs each event that matters by default.
    daemon = subprocess.Popen([DIGESTBOT, "run"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _states(database) == ["empty", "empty"], daemon, "two empty days")
        waiting = " ".join(cli("preview", "ada@example.org").split())
        assert "open until 24:00; these go out as soon as the planner sees them" in waiting, waiting
        time.sleep(2)
        seed = sorted((ROOT / "seeds").glob("*.txt"))[0]
        (folder / "today.txt.tmp").write_bytes(seed.read_bytes())
        (folder / "today.txt.tmp").rename(folder / "today.txt")
        _wait_for(lambda: _states(database) == ["sent", "sent"], daemon, "two digests sent")
        assert len(sink.received) == 2
        _assert_metrics_tell_the_day(metrics_port)
        history = cli("history", "--json")
        after = " ".join(cli("preview", "ada@example.org").split())
        assert "after today.txt arrived; these go out with tomorrow's digest at " in after, after
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert daemon.stderr is not None
    _assert_one_line_per_event(daemon.stderr.read(), sink.port)
    stories = [line for line in history.splitlines() if '"story"' in line]
    assert len(stories) == 2 and all("after today.txt arrived" in s and '"nothing at ' in s for s in stories)
    (today,) = [json.loads(line) for line in cli("stats", "--json").splitlines()]
    assert (today["sent"], today["empty"]) == (2, 0)


def _assert_metrics_tell_the_day(port: int) -> None:
    """/metrics parsed with prometheus-client's own parser; /healthz fresh."""
    from prometheus_client.parser import text_string_to_metric_families

    scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain; version=")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
    }
    assert samples[("digestbot_entries_ingested_total", (("change", "new"),))] == 5
    assert samples[("digestbot_sources_total", (("status", "ingested"),))] == 1
    assert samples[("digestbot_digests_planned_total", ())] == 2
    assert samples[("digestbot_messages_total", (("outcome", "sent"),))] == 2
    assert samples[("digestbot_smtp_replies_total", (("class", "2xx"),))] == 2
    assert samples[("digestbot_delivery_latency_seconds_count", ())] == 2
    assert samples[("digestbot_digests_due", ())] == 0
    assert samples[("digestbot_oldest_due_digest_age_seconds", ())] == 0
    assert samples[("digestbot_digests_waiting", (("state", "queued"),))] == 0
    for job in ("ingest", "plan", "deliver"):
        assert time.time() - samples[("digestbot_last_success_timestamp_seconds", (("job", job),))] < 60
    health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
    assert health.status_code == 200 and health.text.startswith("plan: ok") and "deliver: ok" in health.text
    assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 404


def _assert_one_line_per_event(logged: str, port: int) -> None:
    events = [line.split(": ", 1)[1] if ": " in line else line for line in logged.splitlines()]
    assert events[0].startswith("digestbot ") and " started as scheduler and worker " in events[0]
    assert "database sqlite:///" in events[0] and f"SMTP 127.0.0.1:{port} (tls none)" in events[0]
    assert "planned 0 digests (2 with nothing new, 0 not due yet)" in events
    assert any(e.endswith("today.txt: 5 entries, 5 new, 0 updated") and e.startswith("ingested ") for e in events)
    assert "planned 2 digests (0 with nothing new, 0 not due yet)" in events
    delivered = [e for e in events if e.startswith("delivered: ")]
    assert len(delivered) == 1 and re.fullmatch(
        r"delivered: sent 2, retrying 0, failed 0, bounced 0, cancelled 0 in [\d.]+ s \([\d.]+ messages/s\)",
        delivered[0],
    )
    assert events[-1] == "stopped"
    assert "apscheduler" not in logged and "Running job" not in logged and "Traceback" not in logged
    assert len(events) <= 12, logged  # one line per event, not per tick


def _states(database: Path) -> list[str]:
    if not database.exists():
        return []
    with sqlite3.connect(database) as conn:
        try:
            return [state for (state,) in conn.execute("SELECT state FROM digests ORDER BY id")]
        except sqlite3.OperationalError:  # the daemon has not created the tables yet
            return []


def _wait_for(condition: Callable[[], bool], daemon: subprocess.Popen, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if daemon.poll() is not None:
            raise AssertionError(f"the daemon exited while waiting for {what}: {daemon.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {seconds:g} s")
        time.sleep(0.2)


def test_log_lines_can_be_json_for_log_shippers(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env["DIGESTBOT_DATABASE__URL"] = f"sqlite:///{tmp_path / 'd.sqlite3'}"
    env["DIGESTBOT_SMTP__PORT"] = "9"  # nothing is due, so nothing is sent
    daemon = subprocess.Popen(
        [DIGESTBOT, "--log-format", "json", "worker"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert daemon.stderr is not None
        first = json.loads(daemon.stderr.readline())
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
        rest = [json.loads(line) for line in daemon.stderr.read().splitlines()]
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert first["level"] == "INFO" and first["logger"] == "bot.run.scheduler"
    assert first["message"].startswith("digestbot ") and " started as worker " in first["message"]
    assert datetime.fromisoformat(first["time"]).tzinfo is not None
    assert rest[-1]["message"] == "stopped"


HOSTILE_REFERENCES = ("&#xD800;", "&#xDFFF;", "&#x110000;", "&#99999999999999999999;", "&#x0;")


def _hostile_feed(n: int, reference: str) -> bytes:
    return (
        '<?xml version="1.0"?><rss version="2.0"><channel><title>hostile</title>'
        f"<item><title>Hostile {n} {reference} paper</title><description>x {reference} y</description>"
        f"<guid>hostile-{n}</guid></item></channel></rss>"
    ).encode()


@pytest.mark.slow
def test_a_hostile_feed_and_file_beside_good_ones_change_nothing_for_the_good_ones(tmp_path: Path, sink) -> None:
    """Issue 47, item 1: a character reference feedparser raised on stopped `run` within a
    second.  Feeds and a file holding each kind sit before good ones: the daemon stays up,
    logs no traceback, ingests the good ones and sends the day's digest."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    good_feed = (ROOT / "tests" / "fixtures" / "arxiv_day1.rss").read_bytes()

    class Feeds(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server calls do_<METHOD> by name
            name = self.path.strip("/")
            body = good_feed if name == "good.rss" else _hostile_feed(int(name), HOSTILE_REFERENCES[int(name)])
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Feeds)
    Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    zone, hour = _zone_in_mid_hour()
    folder = tmp_path / "dumps"
    folder.mkdir()
    for n, reference in enumerate(HOSTILE_REFERENCES):
        (folder / f"a-{n}.rss").write_bytes(_hostile_feed(n + 10, reference))
    (folder / "b-good.txt").write_bytes(sorted((ROOT / "seeds").glob("*.txt"))[0].read_bytes())
    urls = json.dumps([f"{base}/{n}" for n in range(len(HOSTILE_REFERENCES))] + [f"{base}/good.rss"])
    env = daemon_env(tmp_path, "d.sqlite3", folder, sink.port, watch__interval_seconds="1", feeds__urls=urls)
    Cli(tmp_path, env, placed=False)("subscribers", "add", "ada@example.org", "--tz", zone, "--hour", str(hour))
    daemon = subprocess.Popen([DIGESTBOT, "run"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _states(tmp_path / "d.sqlite3") == ["sent"], daemon, "the day's digest sent")
        time.sleep(2)  # a few more scans and fetches of the same sources
        assert daemon.poll() is None
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
        server.shutdown()
        server.server_close()
    logged = daemon.stderr.read() if daemon.stderr else ""
    assert "Traceback" not in logged and "ingest failed" not in logged and "stopped by" not in logged, logged
    assert "HTTP Request" not in logged  # httpx's line per request is not an event
    with sqlite3.connect(tmp_path / "d.sqlite3") as conn:
        titles = [title for (title,) in conn.execute("SELECT title FROM entries")]
        statuses = [status for (status,) in conn.execute("SELECT status FROM sources")]
    assert sum(title.startswith("Hostile ") and "\ufffd" in title for title in titles) == 2 * len(HOSTILE_REFERENCES)
    assert "Elastic KV Cache Offloading for Multi-Tenant LLM Serving" in titles  # the good feed
    assert len(titles) >= 2 * len(HOSTILE_REFERENCES) + 5 + 2 and "failed" not in statuses
    (mail,) = sink.received
    assert mail.recipients == ["ada@example.org"]


def test_a_reader_that_raises_is_that_files_failure_never_the_scans(
    factory: sessionmaker[Session], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a format's reader raises (here a KeyError from a library) is the file's
    one-line failure, recorded and not retried; the file after it is ingested."""
    import bot.ingest.formats
    from bot.ingest.watcher import scan_folder

    real = bot.ingest.formats.parse_dump

    def reader(data: bytes, name: str):  # noqa: ANN202 - parse_dump's own signature
        if b"poison" in data:
            raise KeyError("a library's bug")
        return real(data, name)

    monkeypatch.setattr(bot.ingest.formats, "parse_dump", reader)
    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"poison\n\nA. Author 2026-06-14\n\nText.\n\nPDF\n")
    (folder / "b.txt").write_bytes(sorted((ROOT / "seeds").glob("*.txt"))[0].read_bytes())
    bad, good = scan_folder(factory, folder, quiet_seconds=0)
    assert bad.status.value == "failed" and good.status.value == "ingested" and good.new == 5
    assert bad.error == f'{bad.path}: could not be read as a dump (KeyError: "a library\'s bug")'
    assert scan_folder(factory, folder, quiet_seconds=0) == []  # recorded: not retried until it changes


def test_a_stop_asked_while_a_worker_starts_exits_cleanly(tmp_path: Path) -> None:
    """SIGTERM as soon as the command listens for it (its handler is in /proc's SigCgt),
    whether the worker is still opening its store and loading its parts or already runs:
    exit 0 and no traceback, never the signal's default (-15)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env["DIGESTBOT_DATABASE__URL"] = f"sqlite:///{tmp_path / 'd.sqlite3'}"
    env["DIGESTBOT_SMTP__PORT"] = "9"
    worker = subprocess.Popen([DIGESTBOT, "worker"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _catches_sigterm(worker.pid), worker, "a SIGTERM handler")
        worker.send_signal(signal.SIGTERM)
        try:
            assert worker.wait(timeout=30) == 0
        except subprocess.TimeoutExpired:  # say what it was doing, for the next time
            worker.kill()
            pytest.fail(f"the worker did not stop within 30 s of SIGTERM; it logged: {worker.communicate()[1][-3000:]}")
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.stderr is not None and "Traceback" not in worker.stderr.read()


def _catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))
