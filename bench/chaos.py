"""The fault harness (`make chaos`): the daemon run as operators run it, against a relay
that misbehaves as real ones do, with readers leaving and workers killed, paused and
stopped meanwhile, over a store holding rows a restore might bring and (SQLite) on a disk
that fills; then the promises checked, counted at the relay.

Usage: python bench/chaos.py [--backend sqlite|postgresql|both] [--readers 40]
       [--kills 2] [--unsubscribes 6] [--seed N] [--deadline 240]

Per backend (PostgreSQL: ``DIGESTBOT_TEST_PG``, a fresh schema; skipped when unset):
``digestbot scheduler``, ``digestbot worker`` (two on PostgreSQL, one on SQLite, which
admits one) and ``digestbot serve``, as processes of their own.  The relay is aiosmtpd on
127.0.0.1 and answers, drawn from the seed per (recipient, attempt): 451 at RCPT, 452
after DATA, a connection dropped after the body, 554 after DATA, a slow reply to the
final dot (0.3 s; 8 s, past the steps' timeout and within the wait for that reply; 14 s,
past that wait too), 550 to a few dead mailboxes, and 451 "rate limited" beyond
``RELAY_RATE`` messages a second.  It counts every message whose whole body reached it,
whatever it answered and whether the worker still listened (``SinkHandler.bodies``).
The workers send at ``smtp.rate_per_second`` (so a batch outlives its 10-second lease),
retry within seconds, and meanwhile: one is SIGKILLed and started again ``--kills``
times; one is stopped (SIGSTOP) for longer than its lease and resumed; one is told to
stop (SIGTERM) in the middle of a slow send and started again; on PostgreSQL one runs
with its clock an hour ahead (faketime, where installed); on SQLite the store's own disk
(a small tmpfs, where the machine lets one be mounted) fills for a few seconds.  Readers
unsubscribe through ``/u/TOKEN`` (one-click POST).  The store holds readers a restore
might bring: a zone that does not exist, hour 99, status 'evil', a filter that does not
parse, cadence 'hourly', and a reader whose taste model cannot be fitted.

At the end, the promises (exit 1 naming each broken one; the seed replays the run):
no message passed on by the relay twice, whatever was killed, paused or stopped; what
the store calls unknown (on the wire, no answer seen) explained by the relay (dropped
after the body, answered after the wait) or in flight at a kill, pause, stop or full
disk; each reader at most one scheduled digest a local day; every acknowledged
unsubscribe applied and never mailed after (a message begun within 3 s of the answer may
have been let through before it); every healthy reader served (or their digest unknown);
every dead mailbox bounced (or its digest unknown); no unreadable reader mailed, and the planner saying it left
them out; a stop within its deadline, saying what it left; no worker that was not paused
told its digests were taken; an unsubscribe answered within seconds while the disk was
full; no traceback and no failed job in any log (but a job the full disk failed, or on
SQLite one that found the store's write lock held by the paused worker).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402

from bench import chaos_channels  # noqa: E402
from bot.delivery.leases import TAKEN  # noqa: E402
from bot.delivery.outcomes import RECORD_EVERY  # noqa: E402
from bot.tokens import make_token  # noqa: E402
from bot.tools.sink import Fault, Sink, SinkHandler, free_port  # noqa: E402
from tests.chat_servers import chat_servers  # noqa: E402
from tests.helpers import postgres_schema, render_dump  # noqa: E402

DIGESTBOT = str(Path(sys.executable).parent / "digestbot")
KEY = "chaos-signing-key-0123456789abcdef"
POOL_SIZE = 2
RELAY_RATE = 4  # messages a second the relay takes before it answers 451 "rate limited" (two workers send 6)
SEND_RATE = 3  # smtp.rate_per_second: 40 readers take 13 s, longer than the 10-s lease
LEASE_SECONDS = 10
STEPS_SECONDS = 5  # smtp.timeout_seconds: each step before the final dot
REPLY_SECONDS = 10  # smtp.final_reply_seconds: the wait for the reply to the final dot
STOP_SECONDS = 5  # digest.stop_seconds
PAUSE_SECONDS = LEASE_SECONDS + 4  # a worker stopped longer than its lease
FULL_SECONDS = 6  # how long the disk stays full
BUSY_SECONDS = 5  # a SQLite writer's wait for the write lock (store.engine busy_timeout_ms)
LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"  # bot.logs.TEXT_FORMAT's asctime
ZONES = ("UTC", "Europe/Warsaw", "Pacific/Kiritimati", "America/Adak", "Asia/Kolkata", "Australia/Eucla")
UNREADABLE = {  # what a restored backup or a hand-made change can put in a reader's row
    "zone": "timezone = 'Mars/Olympus'",
    "hour": "send_hour = 99",
    "status": "status = 'evil'",
    "filter": "filter = '((gpu'",
    "cadence": "cadence = 'hourly'",
}
TODAY = datetime.now(UTC).date()
UNSUBSCRIBE_GRACE = 3.0  # seconds: a message the worker let through just before the answer may begin after it


@dataclass
class Copy:
    """A message whose whole body reached the relay, and what became of it."""

    recipient: str
    message_id: str
    begun: float  # when its RCPT came (monotonic)
    done: float  # when its fate was known
    fate: str  # Body.fate: accepted, late, dropped, or the refusal

    @property
    def delivered(self) -> bool:
        return self.fate in ("accepted", "late", "dropped")


DEAD = Fault("rcpt", "550 5.1.1 no such mailbox")
# Each drawn per (recipient, attempt): below the first figure, the first fault, and so on.
DRAWN = (
    (0.08, Fault("rcpt", "451 4.3.0 try again later")),
    (0.14, Fault("data", "452 4.3.1 insufficient storage")),
    (0.18, Fault("data", drop=True)),
    (0.20, Fault("data", "554 5.6.0 message refused")),
    (0.36, Fault("data", "250 OK", stall=0.3)),
    (0.40, Fault("data", "250 OK ", stall=8.0)),  # past the steps' timeout, within the reply's wait: waited for
    (0.42, Fault("data", "250 OK  ", stall=14.0)),  # past the reply's wait: unknown, and the relay has it
)
FAULT_NAMES = {
    "550 5.1.1 no such mailbox": "550 to a dead mailbox",
    "451 4.3.0 try again later": "451 at RCPT",
    "452 4.3.1 insufficient storage": "452 after DATA",
    "drop": "connection dropped after the body",
    "554 5.6.0 message refused": "554 after DATA",
    "250 OK": "slow reply (0.3 s)",
    "250 OK ": "reply after the steps' timeout (8 s)",
    "250 OK  ": "reply after the worker's wait (14 s)",
}


@dataclass
class ChaosRelay(SinkHandler):
    """The sink, misbehaving per (recipient, attempt) as the seed draws it, keeping each
    body that reached it with its fate and times."""

    seed: int = 0
    dead: frozenset[str] = frozenset()
    copies: list[Copy] = field(default_factory=list)
    begun: dict[str, float] = field(default_factory=dict)
    injected: Counter[str] = field(default_factory=Counter)
    refused: set[str] = field(default_factory=set)  # given a 5xx at least once: not served, by design
    recent: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.faults = self._drawn

    async def _fault_for(self, recipient: str, where: str, server: Any, body: bytes = b"") -> str | None:
        if where == "rcpt":
            now = time.monotonic()
            with self.lock:  # the messages it let through in the last second, as a relay counts them
                self.begun[recipient] = now
                self.recent = [t for t in self.recent if now - t < 1.0]
                limited = len(self.recent) >= RELAY_RATE and recipient not in self.dead
                if not limited:
                    self.recent.append(now)
            if limited:
                self._count("451 rate limited")
                return "451 4.7.1 rate limited, slow down"
        fault = self._drawn(recipient, self.attempts.get(recipient, 1) - 1)
        if fault is not None and fault.at == where:
            self._count(FAULT_NAMES[fault.reply or "drop"])
            if (fault.reply or "").startswith("5"):
                with self.lock:
                    self.refused.add(recipient)
        return await super()._fault_for(recipient, where, server, body)

    def _arrived(self, recipient: str, data: bytes, fate: str) -> None:
        super()._arrived(recipient, data, fate)
        with self.lock:
            body = self.bodies[-1]
            begun = self.begun.get(recipient, time.monotonic())
            self.copies.append(Copy(recipient, body.message_id, begun, time.monotonic(), fate))

    def _count(self, name: str) -> None:
        with self.lock:
            self.injected[name] += 1

    def _drawn(self, recipient: str, attempt: int) -> Fault | None:
        if recipient in self.dead:
            return DEAD
        draw = int.from_bytes(hashlib.blake2b(f"{self.seed}:{recipient}:{attempt}".encode()).digest()[:8]) / 2**64
        return next((fault for below, fault in DRAWN if draw < below), None)

    def delivered(self) -> list[Copy]:
        with self.lock:
            return [copy for copy in self.copies if copy.delivered]


@dataclass
class Event:
    """A fault the harness made a process meet: when, to which, and what it found."""

    kind: str  # kill, pause, stop, full disk
    process: str
    at: float
    note: str = ""


@dataclass
class Run:
    backend: str
    url: str
    folder: Path
    relay: ChaosRelay
    readers: list[str]
    seed: int
    disk: Path | None = None  # the small filesystem the SQLite store is on, if one could be mounted
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    paused: set[str] = field(default_factory=set)
    skewed: set[str] = field(default_factory=set)  # workers whose clock is an hour ahead, kept so when started again
    acknowledged: dict[str, float] = field(default_factory=dict)
    full: tuple[float, float] | None = None  # when the disk was full (monotonic)
    held: list[tuple[datetime, datetime]] = field(default_factory=list)  # a paused writer may hold the lock (wall)
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    relay_port: int = 0
    serve_port: int = 0
    tokens: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0
    unknown: int = 0
    unknown_unexplained: int = 0
    unserved_unknown: int = 0
    seconds: float = 0.0
    channels: str = ""  # what the chat rooms got (chaos_channels)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def env(self, serve_port: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
        settings = {
            "DATABASE__URL": self.url,
            "PATHS__DUMP_DIR": str(self.folder / "dumps"),
            "PATHS__VAR_DIR": str(self.folder / "var"),
            "PATHS__TAGS_FILE": str(ROOT / "config" / "tags.toml"),
            "PATHS__TEMPLATES_DIR": str(ROOT / "templates"),
            "WATCH__INTERVAL_SECONDS": "1",
            "WATCH__QUIET_SECONDS": "0",
            "SMTP__PORT": str(self.relay_port),
            "SMTP__POOL_SIZE": str(POOL_SIZE),
            "SMTP__RATE_PER_SECOND": str(SEND_RATE),
            "SMTP__TIMEOUT_SECONDS": str(STEPS_SECONDS),
            "SMTP__FINAL_REPLY_SECONDS": str(REPLY_SECONDS),
            "SMTP__RETRY_BASE_SECONDS": "1",
            "SMTP__RETRY_MAX_SECONDS": "3",
            "SMTP__MAX_ATTEMPTS": "12",
            "DIGEST__LEASE_SECONDS": str(LEASE_SECONDS),
            "DIGEST__STOP_SECONDS": str(STOP_SECONDS),
            "WEB__SIGNING_KEY": KEY,
            "WEB__PUBLIC_URL": f"http://127.0.0.1:{serve_port}",
        }
        return env | {f"DIGESTBOT_{name}": value for name, value in settings.items()}

    def happened(self, kind: str, process: str, note: str = "") -> None:
        with self.lock:
            self.events.append(Event(kind, process, time.monotonic(), note))


def _cli(env: dict[str, str], folder: Path, *args: str) -> str:
    done = subprocess.run([DIGESTBOT, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"digestbot {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def _prepare(run: Run, env: dict[str, str], rng: random.Random) -> None:
    """Readers (the healthy ones, the unreadable ones, one with an unfittable model) and the dumps."""
    rows = ["email,filter,timezone,send_hour,backfill"]
    rows += [f"{email},*,{rng.choice(ZONES)},0,all" for email in run.readers]
    rows += [f"{name}@unreadable.example,*,UTC,0,all" for name in UNREADABLE]
    rows.append("model@example.org,*,UTC,0,all")
    (run.folder / "readers.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    _cli(env, run.folder, "db", "upgrade")
    _cli(env, run.folder, "subscribers", "import", str(run.folder / "readers.csv"))
    alike = [(f"GPU paper word{n} {n}", ["Ann Author"], TODAY, "One summary all of them share.") for n in range(1000)]
    (run.folder / "alike.txt").write_text(render_dump(alike), encoding="utf-8")
    _cli(env, run.folder, "dumps", "ingest", str(run.folder / "alike.txt"))
    library = run.folder / "library.bib"
    library.write_text("@article{a, title={GPU paper word1 1}}\n@article{b, title={GPU paper word2 2}}\n")
    _cli(env, run.folder, "subscribers", "library", "add", "model@example.org", str(library))
    engine = create_engine(run.url)
    with engine.begin() as connection:
        for name, change in UNREADABLE.items():
            connection.execute(text(f"UPDATE subscribers SET {change} WHERE email = '{name}@unreadable.example'"))
    engine.dispose()


def _libfaketime() -> str | None:
    """The multi-threaded libfaketime, preloaded into the skewed worker itself: the
    ``faketime`` command would wrap it in a process of its own, which a SIGTERM ends while
    the worker goes on (the harness would then stop the wrapper, not the worker)."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    return found[0] if found else None


def _start(run: Run, name: str, env: dict[str, str], *args: str, skewed: bool = False) -> None:
    log = (run.folder / f"{name}.log").open("ab")
    command = [DIGESTBOT, "-v", *args]
    library = _libfaketime()
    if skewed:
        run.skewed.add(name)
    if name in run.skewed and library:  # its clock an hour ahead, started again so too
        env = {**env, "LD_PRELOAD": library, "FAKETIME": "+1h"}
    run.processes[name] = process = subprocess.Popen(command, cwd=run.folder, env=env, stderr=log, stdout=log)
    # The faults are a running process's: a signal sent while the interpreter still imports,
    # before the command listens for it, ends any program by the signal's default.
    deadline = time.monotonic() + 30
    while process.poll() is None and not _listens_for_sigterm(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _listens_for_sigterm(pid: int) -> bool:
    """Whether the process catches SIGTERM (its bit in /proc's SigCgt)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def _unsubscribe(
    run: Run, port: int, tokens: dict[str, str], rng: random.Random, count: int, stop: Callable[[], bool]
) -> None:
    chosen = rng.sample(sorted(tokens), min(count, len(tokens)))
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for email in chosen:
            time.sleep(rng.uniform(0.2, 3.0))
            if stop():
                return
            _one_click(run, client, email, tokens[email])


def _one_click(run: Run, client: httpx.Client, email: str, token: str) -> float | None:
    """One one-click unsubscribe; how long its answer took (None: it failed)."""
    started = time.monotonic()
    try:
        answer = client.post(
            f"/u/{token}",
            content=b"List-Unsubscribe=One-Click",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
    except httpx.HTTPError as exc:
        run.problems.append(f"an unsubscribe request failed: {exc}")
        return None
    took = time.monotonic() - started
    if answer.status_code == 200 and "You are unsubscribed" in answer.text:
        run.acknowledged[email] = time.monotonic()
    elif answer.status_code == 503 and "try again in a minute" in answer.text and _while_full(run, started):
        pass  # not taken while the disk was full: said so, nothing acknowledged
    else:
        run.problems.append(f"/u/ for {email} answered {answer.status_code}")
    return took


def _while_full(run: Run, at: float) -> bool:
    return run.full is not None and run.full[0] - 1 <= at <= run.full[1] + 10


def _after(run: Run, share: float, readers: int) -> None:
    """Wait until the relay has a *share* of the readers' messages (at most a minute)."""
    deadline = time.monotonic() + 60
    while len(run.relay.copies) < share * readers and time.monotonic() < deadline:
        time.sleep(0.05)


def _faults(run: Run, env: dict[str, str], workers: list[str], rng: random.Random, args: argparse.Namespace) -> None:
    """Kills, then a pause, then a stop mid-send, then (SQLite) a full disk, spread over the run."""
    readers = len(run.readers)
    for n in range(args.kills):
        _after(run, 0.1 + 0.1 * n, readers)
        victim = rng.choice(workers)
        run.processes[victim].send_signal(signal.SIGKILL)
        run.processes[victim].wait()
        run.happened("kill", victim)
        time.sleep(rng.uniform(0.5, 2.0))
        _start(run, victim, env, "worker")
    _after(run, 0.1 + 0.1 * args.kills, readers)
    paused = workers[0]
    stopped = datetime.now()  # the logs are in local time
    run.processes[paused].send_signal(signal.SIGSTOP)
    run.happened("pause", paused)
    run.paused.add(paused)
    time.sleep(PAUSE_SECONDS)
    run.processes[paused].send_signal(signal.SIGCONT)
    run.held.append((stopped, datetime.now() + timedelta(seconds=BUSY_SECONDS + 1)))
    _after(run, 0.2 + 0.1 * args.kills, readers)
    _stop_mid_send(run, env, rng.choice(workers))
    if run.disk is not None:
        _after(run, 0.3 + 0.1 * args.kills, readers)
        _fill_for_a_while(run)


def _stop_mid_send(run: Run, env: dict[str, str], name: str) -> None:
    """SIGTERM a worker while it sends: it must stop within its deadline, saying what it left."""
    process = run.processes[name]
    log = run.folder / f"{name}.log"
    before = log.read_text(errors="replace").count("stopping: ")
    asked = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=STOP_SECONDS + 25)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        run.problems.append(f"{name} did not stop within {STOP_SECONDS + 25} s of SIGTERM")
        code = -9
    took = time.monotonic() - asked
    said = [line for line in log.read_text(errors="replace").splitlines() if "stopping: " in line][before:]
    run.happened("stop", name, f"exit {code} in {took:.1f} s" + (f" ({said[0].split(': ', 1)[1]})" if said else ""))
    if code != 0:
        run.problems.append(f"{name} exited {code} on SIGTERM")
    _start(run, name, env, "worker")


def _fill_for_a_while(run: Run) -> None:
    """Take every free byte of the store's disk for FULL_SECONDS; ask an unsubscribe meanwhile."""
    assert run.disk is not None
    filler = run.disk / "filler"
    began = time.monotonic()
    run.full = (began, began + 3600)
    with filler.open("wb") as handle:
        try:
            os.posix_fallocate(handle.fileno(), 0, shutil.disk_usage(run.disk).free)
        except OSError:
            pass
    while True:  # what fallocate left, a page at a time
        try:
            with filler.open("ab") as handle:
                handle.write(b"\0" * 4096)
        except OSError:
            break
    time.sleep(FULL_SECONDS / 2)
    took = None
    email = next((r for r in run.readers if r not in run.acknowledged), None)
    if email is not None:
        with httpx.Client(base_url=f"http://127.0.0.1:{run.serve_port}", timeout=60) as client:
            took = _one_click(run, client, email, run.tokens[email])
    time.sleep(FULL_SECONDS / 2)
    filler.unlink()
    run.full = (began, time.monotonic())
    run.happened("full disk", "store", f"an unsubscribe answered in {took:.1f} s" if took is not None else "")
    if took is not None and took > 15:
        run.problems.append(f"an unsubscribe took {took:.0f} s to be answered while the disk was full")


def _unsettled(url: str) -> tuple[int, int]:
    """(digests not yet final, digests planned)."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            live = connection.execute(
                text("SELECT count(*) FROM digests WHERE state IN ('queued', 'sending', 'retry_wait')")
            ).scalar_one()
            planned = connection.execute(text("SELECT count(*) FROM digests")).scalar_one()
    finally:
        engine.dispose()
    return int(live), int(planned)


def run_backend(backend: str, url: str, folder: Path, args: argparse.Namespace, seed: int, disk: Path | None) -> Run:
    rng = random.Random(f"{seed}:{backend}")
    readers = [f"reader{n}@example.org" for n in range(args.readers)]
    dead = frozenset(rng.sample(readers, max(1, args.readers // 20)))
    relay = ChaosRelay(seed=seed, dead=dead)
    run = Run(backend, url, folder, relay, readers, seed, disk=disk)
    (folder / "dumps").mkdir(parents=True)
    run.serve_port = free_port()
    with Sink(relay) as sink, chat_servers() as chat:
        run.relay_port = sink.port
        env = run.env(run.serve_port) | {f"DIGESTBOT_{k}": v for k, v in chaos_channels.SETTINGS.items()}
        _prepare(run, env, rng)
        chaos_channels.add_rooms(chat, folder, lambda *args: _cli(env, folder, *args))
        chat_faults = chaos_channels.queue_faults(chat, rng)
        run.tokens = _tokens(url, readers)
        workers = ["worker-a", "worker-b"] if backend == "postgresql" else ["worker-a"]
        _start(run, "serve", env, "serve", "--port", str(run.serve_port))
        _start(run, "scheduler", env, "scheduler")
        skew = backend == "postgresql" and _libfaketime() is not None
        if backend == "postgresql" and not skew:
            run.skipped.append("a worker with its clock an hour ahead (no faketime here: apt-get install faketime)")
        for name in workers:
            _start(run, name, env, "worker", skewed=skew and name == "worker-b")
        started = time.monotonic()
        _wait_for(lambda: _answers(run.serve_port), 60, "serve never answered")
        papers = [(f"Chaos paper {n}", ["A. Author"], TODAY, f"Sparse attention on a GPU, part {n}.") for n in range(5)]
        (folder / "dumps" / "day.txt").write_text(render_dump(papers), encoding="utf-8")
        stop = threading.Event()
        helpers = [
            threading.Thread(
                target=_unsubscribe, args=(run, run.serve_port, run.tokens, rng, args.unsubscribes, stop.is_set)
            ),
            threading.Thread(target=_faults, args=(run, env, workers, rng, args)),
        ]
        for helper in helpers:
            helper.start()
        try:
            _wait_for(lambda: _settled(run, helpers), args.deadline, "digests still on their way at the deadline")
        finally:
            stop.set()
            for helper in helpers:
                helper.join()
            _wait_for(lambda: _applied(url, run.acknowledged), 30, "acknowledged unsubscribes not applied")
            for process in run.processes.values():
                process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
            for process in run.processes.values():
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    run.problems.append(f"a process did not stop within 30 s of SIGTERM: {process.args!r}")
        run.seconds = time.monotonic() - started
        time.sleep(0.5)  # the relay sees the last hang-ups
        caught = sum(1 for event in run.events if event.kind in ("kill", "pause", "stop", "full disk"))
        run.channels, problems = chaos_channels.check_rooms(url, chat, chat_faults, caught)
        run.problems += problems
    _check(run)
    return run


def _wait_for(done: Callable[[], bool], seconds: float, failure: str) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(failure)
        time.sleep(0.25)


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _settled(run: Run, helpers: list[threading.Thread]) -> bool:
    if any(helper.is_alive() for helper in helpers):
        return False
    live, planned = _unsettled(run.url)
    return planned >= len(run.readers) // 2 and live == 0


def _tokens(url: str, emails: list[str]) -> dict[str, str]:
    engine = create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, email, unsubscribe_secret FROM subscribers")).all()
    engine.dispose()
    return {email: make_token(KEY.encode(), sid, secret) for sid, email, secret in rows if email in emails}


def _applied(url: str, acknowledged: dict[str, float]) -> bool:
    return all(status == "unsubscribed" for status in _statuses(url, list(acknowledged)).values())


def _statuses(url: str, emails: list[str]) -> dict[str, str]:
    engine = create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT email, status FROM subscribers")).all()
    engine.dispose()
    return {email: status for email, status in rows if email in emails}


def _check(run: Run) -> None:
    """Every promise the harness holds the daemon to; what breaks one goes in run.problems."""
    delivered = run.relay.delivered()
    by_id: dict[str, list[Copy]] = {}
    for copy in delivered:
        by_id.setdefault(copy.message_id, []).append(copy)
    twice = [found for found in by_id.values() if len(found) > 1]
    run.duplicates = sum(len(found) - 1 for found in twice)
    for found in twice:
        run.problems.append(f"{found[0].recipient} got {found[0].message_id} {len(found)} times")
    _check_unknown(run, by_id)
    engine = create_engine(run.url)
    with engine.connect() as connection:
        days = connection.execute(
            text(
                "SELECT s.email, d.local_date, count(*) FROM digests d JOIN subscribers s ON s.id = d.subscriber_id "
                "WHERE d.kind = 'scheduled' GROUP BY s.email, d.local_date HAVING count(*) > 1"
            )
        ).all()
        unknown = {
            email
            for (email,) in connection.execute(
                text(
                    "SELECT s.email FROM digests d JOIN subscribers s ON s.id = d.subscriber_id "
                    "WHERE d.state = 'unknown'"
                )
            )
        }
    engine.dispose()
    run.problems += [f"{email} has {n} scheduled digests on {day}" for email, day, n in days]
    for email, answered in run.acknowledged.items():
        late = [c for c in delivered if c.recipient == email and c.begun > answered + UNSUBSCRIBE_GRACE]
        if late:
            run.problems.append(f"{email} was mailed {late[0].begun - answered:.1f} s after their unsubscribe")
    statuses = _statuses(run.url, [*run.readers, *(f"{n}@unreadable.example" for n in UNREADABLE)])
    received = {copy.recipient for copy in delivered}
    left = set(run.acknowledged) | run.relay.refused
    unserved = sorted(set(run.readers) - left - received - run.relay.dead)
    run.unserved_unknown = len(set(unserved) & unknown)  # on the wire at a kill, never reached the relay
    unserved = [email for email in unserved if email not in unknown]
    if "model@example.org" not in received | unknown | left | run.relay.dead:
        unserved.append("model@example.org (a taste model that cannot be fitted)")
    if unserved:
        run.problems.append(f"{len(unserved)} healthy readers got nothing: {', '.join(unserved[:5])}")
    not_bounced = sorted(  # a digest caught on the wire (unknown) never saw the relay's 550
        e for e in run.relay.dead - set(run.acknowledged) - unknown if statuses.get(e) != "bounced"
    )
    if not_bounced:
        run.problems.append(f"dead mailboxes not marked bounced: {', '.join(not_bounced)}")
    mailed = sorted(r for r in received if r.endswith("@unreadable.example"))
    if mailed:
        run.problems.append(f"unreadable readers were mailed: {', '.join(mailed)}")
    _check_logs(run)


def _check_unknown(run: Run, by_id: dict[str, list[Copy]]) -> None:
    """Each unknown digest is explained: the relay dropped it after its body or answered
    after the worker's wait, or a kill, pause, stop or full disk caught it on the wire."""
    engine = create_engine(run.url)
    with engine.connect() as connection:
        ids = [  # a channel's (chaos_channels checks them)
            row[0]
            for row in connection.execute(
                text(
                    "SELECT d.message_id FROM digests d JOIN subscribers s ON s.id = d.subscriber_id "
                    "WHERE d.state = 'unknown' AND s.email NOT LIKE '%@channels.invalid'"
                )
            )
        ]
    engine.dispose()
    run.unknown = len(ids)
    relay_said = {c.message_id for c in run.relay.copies if c.fate in ("dropped", "late")}
    unexplained = [message_id for message_id in ids if message_id not in relay_said]
    run.unknown_unexplained = len(unexplained)
    caught = sum(1 for event in run.events if event.kind in ("kill", "pause", "stop", "full disk"))
    # Each: on the wire (the pool), marked ahead and answered unrecorded (RECORD_EVERY at most, each).
    bound = caught * (2 * RECORD_EVERY + POOL_SIZE)
    if len(unexplained) > bound:
        run.problems.append(f"{len(unexplained)} digests unknown with no fault to explain them ({bound} allowed)")


def _check_logs(run: Run) -> None:
    logs = {path.name: path.read_text(errors="replace") for path in run.folder.glob("*.log")}
    if "left out of planning" not in logs.get("scheduler.log", ""):
        run.problems.append("the scheduler never said it left the unreadable readers out")
    for name, log in sorted(logs.items()):
        process = name.removesuffix(".log")
        if TAKEN in log and process not in run.paused:
            run.problems.append(f"{name}: a worker that was never paused found its digests taken")
        if TAKEN in log and run.backend == "sqlite":  # one worker at a time: nobody else can have taken one
            run.problems.append(f"{name}: a worker found its digests taken, on SQLite")
        for line in log.splitlines():
            if "Traceback" in line or ("it runs again at its next tick" in line and not _explained(run, line)):
                run.problems.append(f"{name}: {line.strip()[:300]}")
                break
    for event in run.events:
        if event.kind == "stop" and "stopping: " not in (run.folder / f"{event.process}.log").read_text(
            errors="replace"
        ):
            run.problems.append(f"{event.process} stopped without saying what it left")


def _explained(run: Run, line: str) -> bool:
    """A failed job a fault explains: the full disk, or on SQLite the write lock a worker
    held when it was paused (SIGSTOP keeps a transaction open; every other writer waits
    its busy timeout and fails, and the job runs again at its next tick)."""
    if "disk is full" in line:
        return True
    if run.backend != "sqlite" or "database is locked" not in line:
        return False
    try:
        when = datetime.strptime(line[:23], LOG_TIME)  # the logs are in local time
    except ValueError:
        return False
    return any(start <= when <= end for start, end in run.held)


def _report(run: Run) -> None:
    delivered = run.relay.delivered()
    print(
        f"{run.backend}: {len(run.readers)} readers, {len(run.relay.copies)} bodies at the relay, {len(delivered)} "
        f"passed on to {len({c.recipient for c in delivered})} readers, {run.duplicates} twice; {run.unknown} unknown "
        f"({run.unknown - run.unknown_unexplained} explained by the relay, {run.unknown_unexplained} caught on the "
        f"wire by a fault, {run.unserved_unknown} of those never reached it); {len(run.acknowledged)} unsubscribes "
        f"acknowledged, {len(UNREADABLE)} unreadable readers held, {run.seconds:.0f} s"
    )
    print("  relay faults: " + ", ".join(f"{name} {n}" for name, n in sorted(run.relay.injected.items())))
    print(
        "  process faults: "
        + "; ".join(f"{e.kind} {e.process}" + (f": {e.note}" if e.note else "") for e in run.events)
    )
    if run.channels:
        print(f"  {run.channels}")
    for skipped in run.skipped:
        print(f"  skipped: {skipped}")
    for problem in run.problems:
        print(f"  BROKEN: {problem}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--readers", type=int, default=40)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--unsubscribes", type=int, default=6)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--deadline", type=float, default=300, help="seconds for the digests to settle")
    parser.add_argument("--keep", action="store_true", help="keep each run's folder (store, logs) and say where")
    args = parser.parse_args()
    if args.readers < 10:
        parser.error("--readers: at least 10")
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    print(
        f"chaos seed {seed} (replay: python bench/chaos.py --seed {seed} --readers {args.readers} "
        f"--kills {args.kills} --unsubscribes {args.unsubscribes})"
    )
    pg = os.environ.get("DIGESTBOT_TEST_PG", "")
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    broken = 0
    for backend in backends:
        if backend == "postgresql" and not pg:
            print("postgresql: skipped (set DIGESTBOT_TEST_PG=postgresql+psycopg://user@host/db)")
            continue
        kept = tempfile.mkdtemp(prefix=f"chaos-{backend}-") if args.keep else None
        folder = nullcontext(kept) if kept else tempfile.TemporaryDirectory(prefix=f"chaos-{backend}-")
        with folder as tmp, _store(backend, pg, Path(tmp), keep=bool(kept)) as (url, disk):
            if kept:
                print(f"{backend}: kept in {kept}")
            try:
                run = run_backend(backend, url, Path(tmp), args, seed, disk)
            except TimeoutError as exc:
                print(f"{backend}: BROKEN: {exc}; logs:")
                for log in sorted(Path(tmp).glob("*.log")):
                    print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")
                broken += 1
                continue
            _report(run)
            broken += bool(run.problems)
    print(f"chaos: {'every promise kept' if not broken else f'{broken} backends broke a promise'} (seed {seed})")
    return 1 if broken else 0


@contextmanager
def _store(backend: str, pg: str, folder: Path, *, keep: bool) -> Iterator[tuple[str, Path | None]]:
    """The store's URL, and for SQLite the small filesystem it is on (None: none could be
    mounted here, and the full disk is not tried); kept, the store is copied out of it."""
    if backend == "postgresql":
        with postgres_schema(pg) as url:
            yield url, None
        return
    disk = folder / "disk"
    disk.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], check=True, capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        print("sqlite: a full disk not tried (a small filesystem cannot be mounted here: root and mount(8) needed)")
        yield f"sqlite:///{folder / 'store.sqlite3'}", None
        return
    try:
        yield f"sqlite:///{disk / 'store.sqlite3'}", disk
    finally:
        if keep:
            for part in disk.glob("store.sqlite3*"):
                shutil.copy2(part, folder / part.name)
        subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True, timeout=30)


if __name__ == "__main__":
    sys.exit(main())
