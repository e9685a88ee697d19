"""The fault harness (`make chaos`): the daemon run as operators run it, against a relay
that misbehaves as real ones do, with readers leaving and a worker killed meanwhile, over
a store holding rows a restore might bring; then the promises checked.

Usage: python bench/chaos.py [--backend sqlite|postgresql|both] [--readers 40]
       [--kills 2] [--unsubscribes 6] [--seed N] [--deadline 240]

Per backend (PostgreSQL: ``DIGESTBOT_TEST_PG``, a fresh schema; skipped when unset):
``digestbot scheduler``, ``digestbot worker`` (two on PostgreSQL, one on SQLite, which
admits one) and ``digestbot serve``, as processes of their own.  The relay is aiosmtpd on
127.0.0.1 and answers, drawn from the seed per (recipient, attempt): 451 at RCPT, 452
after DATA, a connection dropped after the body, 554 after DATA, a slow DATA (0.3 s) or one that hangs past the
worker's timeout,
550 to a few dead mailboxes, and 451 "rate limited" beyond ``RELAY_RATE`` messages a
second.  The workers send at ``smtp.rate_per_second`` (so a batch outlives its
10-second lease), retry within seconds, and one is SIGKILLed and started again
``--kills`` times while sending.  Readers unsubscribe through ``/u/TOKEN`` (one-click
POST) meanwhile.  The store holds readers a restore might bring: a zone that does not
exist, hour 99, status 'evil', a filter that does not parse, cadence 'hourly', and a
reader whose taste model cannot be fitted (a library over a thousand entries alike).

At the end, the promises (exit 1 naming each broken one; the seed replays the run):
each message at most once, but for those a kill caught sent and not yet recorded
(each copy after a kill, at most RECORD_EVERY + pool size a kill); each reader at most
one scheduled digest a local day; every acknowledged unsubscribe applied and never
mailed after (a message begun within 3 s of the answer may have been let through before it); every
healthy reader served; every dead mailbox bounced; no unreadable reader mailed, and
the planner saying it left them out; no traceback and no failed job in any log.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402

from bot.delivery.outcomes import RECORD_EVERY  # noqa: E402
from bot.tokens import make_token  # noqa: E402
from bot.tools.sink import Fault, Received, Sink, SinkHandler, free_port  # noqa: E402
from tests.helpers import postgres_schema, render_dump  # noqa: E402

DIGESTBOT = str(Path(sys.executable).parent / "digestbot")
KEY = "chaos-signing-key-0123456789abcdef"
POOL_SIZE = 2
RELAY_RATE = 4  # messages a second the relay takes before it answers 451 "rate limited" (two workers send 6)
SEND_RATE = 3  # smtp.rate_per_second: 40 readers take 13 s, longer than the 10-s lease
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
    recipient: str
    message_id: str
    begun: float  # when its RCPT came (monotonic)
    done: float  # when the relay accepted it


DEAD = Fault("rcpt", "550 5.1.1 no such mailbox")
# Each drawn per (recipient, attempt): below the first figure, the first fault, and so on.
DRAWN = (
    (0.08, Fault("rcpt", "451 4.3.0 try again later")),
    (0.14, Fault("data", "452 4.3.1 insufficient storage")),
    (0.18, Fault("data", drop=True)),
    (0.20, Fault("data", "554 5.6.0 message refused")),
    (0.40, Fault("data", "250 OK", stall=0.3)),
    (0.42, Fault("data", "250 OK", stall=8.0)),  # a hang past smtp.timeout_seconds: the worker gives up
)
FAULT_NAMES = {
    "550 5.1.1 no such mailbox": "550 to a dead mailbox",
    "451 4.3.0 try again later": "451 at RCPT",
    "452 4.3.1 insufficient storage": "452 after DATA",
    "drop": "connection dropped after the body",
    "554 5.6.0 message refused": "554 after DATA",
    "250 OK": "slow DATA",
}


@dataclass
class ChaosRelay(SinkHandler):
    """The sink, misbehaving per (recipient, attempt) as the seed draws it."""

    seed: int = 0
    dead: frozenset[str] = frozenset()
    copies: list[Copy] = field(default_factory=list)
    begun: dict[str, float] = field(default_factory=dict)
    injected: Counter[str] = field(default_factory=Counter)
    refused: set[str] = field(default_factory=set)  # given a 5xx at least once: not served, by design
    recent: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.faults = self._drawn
        self.on_received = self._received

    async def _fault_for(self, recipient: str, where: str, server: Any) -> str | None:
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
        return await super()._fault_for(recipient, where, server)

    def _count(self, name: str) -> None:
        with self.lock:
            self.injected[name] += 1

    def _drawn(self, recipient: str, attempt: int) -> Fault | None:
        if recipient in self.dead:
            return DEAD
        draw = int.from_bytes(hashlib.blake2b(f"{self.seed}:{recipient}:{attempt}".encode()).digest()[:8]) / 2**64
        return next((fault for below, fault in DRAWN if draw < below), None)

    def _received(self, received: Received, _saved: Path | None) -> None:
        recipient = received.recipients[0]
        with self.lock:
            begun = self.begun.get(recipient, time.monotonic())
            self.copies.append(Copy(recipient, str(received.message["Message-ID"]), begun, time.monotonic()))


@dataclass
class Run:
    backend: str
    url: str
    folder: Path
    relay: ChaosRelay
    readers: list[str]
    seed: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    kills: list[float] = field(default_factory=list)
    acknowledged: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    relay_port: int = 0
    duplicates: int = 0
    seconds: float = 0.0

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
            "SMTP__TIMEOUT_SECONDS": "5",
            "SMTP__RETRY_BASE_SECONDS": "1",
            "SMTP__RETRY_MAX_SECONDS": "3",
            "SMTP__MAX_ATTEMPTS": "12",
            "DIGEST__LEASE_SECONDS": "10",
            "WEB__SIGNING_KEY": KEY,
            "WEB__PUBLIC_URL": f"http://127.0.0.1:{serve_port}",
        }
        return env | {f"DIGESTBOT_{name}": value for name, value in settings.items()}


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


def _start(run: Run, name: str, env: dict[str, str], *args: str) -> None:
    log = (run.folder / f"{name}.log").open("ab")
    run.processes[name] = subprocess.Popen([DIGESTBOT, "-v", *args], cwd=run.folder, env=env, stderr=log, stdout=log)


def _unsubscribe(
    run: Run, port: int, tokens: dict[str, str], rng: random.Random, count: int, stop: Callable[[], bool]
) -> None:
    chosen = rng.sample(sorted(tokens), min(count, len(tokens)))
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for email in chosen:
            time.sleep(rng.uniform(0.2, 3.0))
            if stop():
                return
            try:
                answer = client.post(
                    f"/u/{tokens[email]}",
                    content=b"List-Unsubscribe=One-Click",
                    headers={"content-type": "application/x-www-form-urlencoded"},
                )
            except httpx.HTTPError as exc:
                run.problems.append(f"an unsubscribe request failed: {exc}")
                continue
            if answer.status_code == 200 and "You are unsubscribed" in answer.text:
                run.acknowledged[email] = time.monotonic()
            else:
                run.problems.append(f"/u/ for {email} answered {answer.status_code}")


def _kill_workers(run: Run, env: dict[str, str], workers: list[str], rng: random.Random, kills: int) -> None:
    for _ in range(kills):
        deadline = time.monotonic() + 60
        start = len(run.relay.copies)
        while len(run.relay.copies) < start + rng.randint(3, 10) and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = rng.choice(workers)
        run.processes[victim].send_signal(signal.SIGKILL)
        run.processes[victim].wait()
        run.kills.append(time.monotonic())
        time.sleep(rng.uniform(0.5, 2.0))
        _start(run, victim, env, "worker")


def _unsettled(url: str) -> tuple[int, int]:
    """(digests not yet final, unsubscribe requests not yet applied)."""
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


def run_backend(backend: str, url: str, folder: Path, args: argparse.Namespace, seed: int) -> Run:
    rng = random.Random(f"{seed}:{backend}")
    readers = [f"reader{n}@example.org" for n in range(args.readers)]
    dead = frozenset(rng.sample(readers, max(1, args.readers // 20)))
    relay = ChaosRelay(seed=seed, dead=dead)
    run = Run(backend, url, folder, relay, readers, seed)
    (folder / "dumps").mkdir(parents=True)
    serve_port = free_port()
    with Sink(relay) as sink:
        run.relay_port = sink.port
        env = run.env(serve_port)
        _prepare(run, env, rng)
        tokens = _tokens(url, readers)
        workers = ["worker-a", "worker-b"] if backend == "postgresql" else ["worker-a"]
        _start(run, "serve", env, "serve", "--port", str(serve_port))
        _start(run, "scheduler", env, "scheduler")
        for name in workers:
            _start(run, name, env, "worker")
        started = time.monotonic()
        _wait_for(lambda: _answers(serve_port), 60, "serve never answered")
        papers = [(f"Chaos paper {n}", ["A. Author"], TODAY, f"Sparse attention on a GPU, part {n}.") for n in range(5)]
        (folder / "dumps" / "day.txt").write_text(render_dump(papers), encoding="utf-8")
        stop = threading.Event()
        helpers = [
            threading.Thread(target=_unsubscribe, args=(run, serve_port, tokens, rng, args.unsubscribes, stop.is_set)),
            threading.Thread(target=_kill_workers, args=(run, env, workers, rng, args.kills)),
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
                process.send_signal(signal.SIGTERM)
            for process in run.processes.values():
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    run.problems.append(f"a process did not stop within 30 s of SIGTERM: {process.args!r}")
        run.seconds = time.monotonic() - started
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
    copies = run.relay.copies
    by_id: dict[str, list[Copy]] = {}
    for copy in copies:
        by_id.setdefault(copy.message_id, []).append(copy)
    twice = [found for found in by_id.values() if len(found) > 1]
    run.duplicates = sum(len(found) - 1 for found in twice)
    bound = len(run.kills) * (RECORD_EVERY + POOL_SIZE)
    if run.duplicates > bound:
        run.problems.append(f"{run.duplicates} messages went out twice; {len(run.kills)} kills allow {bound}")
    for found in twice:
        for first, again in zip(found, found[1:], strict=False):
            if not any(first.begun <= kill <= again.begun for kill in run.kills):
                run.problems.append(f"{first.recipient} got {first.message_id} twice with no kill between")
    engine = create_engine(run.url)
    with engine.connect() as connection:
        days = connection.execute(
            text(
                "SELECT s.email, d.local_date, count(*) FROM digests d JOIN subscribers s ON s.id = d.subscriber_id "
                "WHERE d.kind = 'scheduled' GROUP BY s.email, d.local_date HAVING count(*) > 1"
            )
        ).all()
    engine.dispose()
    run.problems += [f"{email} has {n} scheduled digests on {day}" for email, day, n in days]
    for email, answered in run.acknowledged.items():
        late = [c for c in copies if c.recipient == email and c.begun > answered + UNSUBSCRIBE_GRACE]
        if late:
            run.problems.append(f"{email} was mailed {late[0].begun - answered:.1f} s after their unsubscribe")
    statuses = _statuses(run.url, [*run.readers, *(f"{n}@unreadable.example" for n in UNREADABLE)])
    received = {copy.recipient for copy in copies}
    left = set(run.acknowledged) | run.relay.refused
    unserved = sorted(set(run.readers) - left - received - run.relay.dead)
    if "model@example.org" not in received:
        unserved.append("model@example.org (a taste model that cannot be fitted)")
    if unserved:
        run.problems.append(f"{len(unserved)} healthy readers got nothing: {', '.join(unserved[:5])}")
    not_bounced = sorted(e for e in run.relay.dead - set(run.acknowledged) if statuses.get(e) != "bounced")
    if not_bounced:
        run.problems.append(f"dead mailboxes not marked bounced: {', '.join(not_bounced)}")
    mailed = sorted(r for r in received if r.endswith("@unreadable.example"))
    if mailed:
        run.problems.append(f"unreadable readers were mailed: {', '.join(mailed)}")
    logs = {path.name: path.read_text(errors="replace") for path in run.folder.glob("*.log")}
    if "left out of planning" not in logs.get("scheduler.log", ""):
        run.problems.append("the scheduler never said it left the unreadable readers out")
    reclaimed = sum(log.count("reclaimed by another worker") for name, log in logs.items())
    if reclaimed and run.backend == "sqlite":  # one worker at a time: nobody else can have taken one
        run.problems.append(f"a worker said {reclaimed} times that another took its digests, on SQLite")
    for name, log in sorted(logs.items()):
        for line in log.splitlines():
            if "Traceback" in line or "it runs again at its next tick" in line:
                run.problems.append(f"{name}: {line.strip()[:300]}")
                break


def _report(run: Run) -> None:
    copies = run.relay.copies
    print(
        f"{run.backend}: {len(run.readers)} readers, {len(copies)} messages to {len({c.recipient for c in copies})} "
        f"readers, {run.duplicates} twice after {len(run.kills)} kills (at most "
        f"{len(run.kills) * (RECORD_EVERY + POOL_SIZE)} allowed), {len(run.acknowledged)} unsubscribes acknowledged, "
        f"{len(UNREADABLE)} unreadable readers held, {run.seconds:.0f} s"
    )
    print("  relay faults: " + ", ".join(f"{name} {n}" for name, n in sorted(run.relay.injected.items())))
    for problem in run.problems:
        print(f"  BROKEN: {problem}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--readers", type=int, default=40)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--unsubscribes", type=int, default=6)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--deadline", type=float, default=240, help="seconds for the digests to settle")
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
        with folder as tmp, _store(backend, pg, Path(tmp)) as url:
            if kept:
                print(f"{backend}: kept in {kept}")
            try:
                run = run_backend(backend, url, Path(tmp), args, seed)
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
def _store(backend: str, pg: str, folder: Path) -> Iterator[str]:
    if backend == "postgresql":
        with postgres_schema(pg) as url:
            yield url
    else:
        with nullcontext():
            yield f"sqlite:///{folder / 'store.sqlite3'}"


if __name__ == "__main__":
    sys.exit(main())
