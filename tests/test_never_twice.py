"""Never twice, as operators run it: ``digestbot worker`` and ``run`` as processes of their
own, against an aiosmtpd relay on 127.0.0.1 that counts every message whose whole body
reached it (``SinkHandler.bodies``), whatever it answered and whether the worker was
still listening.  The faults an operator's machines have: a worker paused past its lease
(SIGSTOP), a disk that fills while a batch is sent (SQLite on a small tmpfs), a stop
asked in the middle of a slow send (SIGINT, once and twice).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.store.engine import make_engine, sessions, upgrade
from bot.store.schema import Digest, SubscriberRow
from bot.tokens import make_token
from bot.tools.sink import Fault, Sink, SinkHandler, free_port
from tests.conftest import PG_SKIP, ROOT
from tests.helpers import DIGESTBOT, queue_digests

pytestmark = pytest.mark.slow

KEY = "never-twice-signing-key-0123456789"


def _env(url: str, folder: Path, port: int, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    values = {
        "DATABASE__URL": url,
        "PATHS__VAR_DIR": str(folder / "var"),
        "PATHS__DUMP_DIR": str(folder / "dumps"),
        "PATHS__TEMPLATES_DIR": str(ROOT / "templates"),
        "PATHS__TAGS_FILE": str(ROOT / "config" / "tags.toml"),
        "WATCH__INTERVAL_SECONDS": "3600",
        "SMTP__PORT": str(port),
        "WEB__SIGNING_KEY": KEY,
    }
    (folder / "dumps").mkdir(exist_ok=True)
    return env | {f"DIGESTBOT_{name}": value for name, value in (values | settings).items()}


def _start(env: dict[str, str], folder: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    log = (folder / f"{name}.log").open("ab")
    return subprocess.Popen([DIGESTBOT, "-v", *args], cwd=folder, env=env, stdout=log, stderr=log)


def _wait(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def _states(factory: sessionmaker[Session]) -> Counter[str]:
    with factory() as session:
        return Counter(dict(session.execute(select(Digest.state, func.count()).group_by(Digest.state)).all()))


def _settled(factory: sessionmaker[Session], total: int) -> bool:
    states = _states(factory)
    return states["sent"] + states["unknown"] + states["failed"] == total


def _twice(handler: SinkHandler) -> dict[str, int]:
    """Message-IDs the relay passed on (or may have) more than once."""
    delivered = Counter(body.message_id for body in handler.bodies if body.delivered)
    return {message_id: n for message_id, n in delivered.items() if n > 1}


def _stopped(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, seconds: float = 60) -> int:
    if process.poll() is None:
        process.send_signal(sig)
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


@PG_SKIP
def test_a_worker_paused_past_its_lease_sends_nothing_another_worker_sent(pg_url: str, tmp_path: Path) -> None:
    """Worker A is stopped (SIGSTOP) after its fourth message, for longer than its lease;
    worker B takes over and finishes; A is resumed.  The relay gets every digest once:
    A learns what it lost before its next message (the mark before the wire finds the
    claim another's), and what it had on the wire when it stopped is unknown, not sent
    by B."""
    total = 30
    engine = make_engine(pg_url)
    factory = sessions(engine)
    queue_digests(factory, total)
    handler = SinkHandler()
    with Sink(handler) as sink:
        env = _env(
            pg_url,
            tmp_path,
            sink.port,
            DIGEST__LEASE_SECONDS="10",
            SMTP__RATE_PER_SECOND="3",
            SMTP__POOL_SIZE="2",
        )
        a = _start(env, tmp_path, "worker-a", "worker")
        b: subprocess.Popen[bytes] | None = None
        try:
            _wait(lambda: len(handler.bodies) >= 4, 60, "A sent four")
            a.send_signal(signal.SIGSTOP)
            paused = time.monotonic()
            b = _start(env, tmp_path, "worker-b", "worker")
            _wait(lambda: _settled(factory, total) and time.monotonic() - paused > 12, 120, "B finished")
            a.send_signal(signal.SIGCONT)
            time.sleep(6)  # A's event loop runs again: what it still held, it learns it lost
        finally:
            a.send_signal(signal.SIGCONT)
            assert _stopped(a) == 0
            if b is not None:
                assert _stopped(b) == 0
    states = _states(factory)
    engine.dispose()
    delivered = {body.message_id for body in handler.bodies if body.delivered}
    log_a = (tmp_path / "worker-a.log").read_text(errors="replace")
    print(f"\npaused worker: {len(handler.bodies)} bodies at the relay, {len(delivered)} distinct, {dict(states)}")
    assert _twice(handler) == {}
    assert states["sent"] + states["unknown"] == total and states["unknown"] <= 2  # A's pool: what it had on the wire
    assert len(delivered) >= states["sent"]
    assert "Traceback" not in log_a


def _mount_small_disk(folder: Path) -> None:
    folder.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"a small filesystem cannot be mounted here (root and mount(8) needed): {exc}")


def _fill(disk: Path) -> Path:
    """Every free byte of *disk* taken by one file; remove it and the space returns."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with filler.open("wb") as handle:
        try:
            os.posix_fallocate(handle.fileno(), 0, free)
        except OSError:  # the worker wrote meanwhile, or the filesystem keeps some for itself
            pass
    while True:  # what fallocate left (all of it, when it refused), a page at a time
        try:
            with filler.open("ab") as handle:
                handle.write(b"\0" * 4096)
        except OSError:
            return filler


def test_a_disk_that_fills_stops_the_sending_and_sends_nothing_twice(tmp_path: Path) -> None:
    """The store (SQLite) is on a small filesystem that fills after ten messages: the
    worker stops putting messages on the wire at the first write the store refuses; a
    one-click unsubscribe meanwhile is answered "try again" (503) within seconds, never
    acknowledged unjournaled, and ``serve`` stops on SIGTERM.  When space returns, the
    answers the worker got are recorded and the rest is sent: nothing twice."""
    disk = tmp_path / "disk"
    _mount_small_disk(disk)
    try:
        _disk_fills(tmp_path, disk)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True, timeout=30)


def _queued(path: Path, total: int) -> tuple[str, Engine, sessionmaker[Session]]:
    """A SQLite store at *path* with *total* digests queued: its URL, engine and sessions."""
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    upgrade(engine)
    factory = sessions(engine)
    queue_digests(factory, total)
    return url, engine, factory


def _disk_fills(tmp_path: Path, disk: Path) -> None:
    total = 40
    url, engine, factory = _queued(disk / "store.sqlite3", total)
    with factory() as session:
        readers = [
            (row.id, row.unsubscribe_secret)
            for row in session.scalars(select(SubscriberRow).order_by(SubscriberRow.id))
        ]
    handler = SinkHandler()
    serve_port = free_port()
    with Sink(handler) as sink:
        env = _env(url, tmp_path, sink.port, SMTP__RATE_PER_SECOND="4", DIGEST__STOP_SECONDS="5")
        env["DIGESTBOT_WEB__PUBLIC_URL"] = f"http://127.0.0.1:{serve_port}"
        serve = _start(env, tmp_path, "serve", "serve", "--port", str(serve_port))
        worker = _start(env, tmp_path, "worker", "worker")
        filler: Path | None = None
        try:
            _wait(lambda: _answers(serve_port) and len(handler.bodies) >= 10, 60, "ten messages went out")
            filler = _fill(disk)
            at_full = len(handler.bodies)
            time.sleep(4)  # the worker meets the full disk at its next write
            reader_id, secret = readers[-1]
            started = time.monotonic()
            answer = httpx.post(
                f"http://127.0.0.1:{serve_port}/u/{make_token(KEY.encode(), reader_id, secret)}",
                content=b"List-Unsubscribe=One-Click",
                headers={"content-type": "application/x-www-form-urlencoded"},
                timeout=60,
            )
            answered_in = time.monotonic() - started
            while_full = len(handler.bodies)
            time.sleep(3)
            assert len(handler.bodies) == while_full  # nothing more went on the wire while the disk was full
            serve_stop = time.monotonic()
            assert _stopped(serve, seconds=30) == 0
            serve_stopped_in = time.monotonic() - serve_stop
            filler.unlink()
            filler = None
            _wait(lambda: _settled(factory, total), 120, "the rest was sent once space returned")
        finally:
            if filler is not None:
                filler.unlink()
            assert _stopped(worker) == 0
            _stopped(serve)
    states = _states(factory)
    engine.dispose()
    log = (tmp_path / "worker.log").read_text(errors="replace")
    print(
        f"\ndisk full: {at_full} messages before it filled, {while_full} when the unsubscribe was answered "
        f"{answer.status_code} in {answered_in:.1f} s, serve stopped in {serve_stopped_in:.1f} s; {dict(states)}"
    )
    assert _twice(handler) == {}
    assert while_full - at_full <= 2  # at most what was on the wire (the pool's two connections)
    assert answer.status_code == 503 and "try again in a minute" in answer.text and answered_in < 15
    assert answer.headers.get("Retry-After") == "60"
    assert serve_stopped_in < 15
    assert states["sent"] + states["unknown"] == total
    assert "nothing more goes on the wire" in log and "Traceback" not in log


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_stop_takes_seconds_and_gives_back_what_is_not_on_the_wire(tmp_path: Path) -> None:
    """600 digests to a relay taking 20 a second: Ctrl-C stops ``digestbot run`` within its
    stop deadline (not after the hundreds it claimed), says what it left, leaves nothing
    claimed, and a restart sends the rest once.  A second Ctrl-C exits at once (130)."""
    total = 600
    url, engine, factory = _queued(tmp_path / "store.sqlite3", total)
    handler = SinkHandler(faults=lambda recipient, attempt: Fault("data", "250 OK", stall=0.05))
    with Sink(handler) as sink:
        env = _env(url, tmp_path, sink.port, SMTP__RATE_PER_SECOND="20", DIGEST__STOP_SECONDS="5")
        run = _start(env, tmp_path, "run", "run")
        _wait(lambda: len(handler.bodies) >= 40, 60, "forty went out")
        asked = time.monotonic()
        code = _stopped(run, signal.SIGINT, seconds=120)
        took = time.monotonic() - asked
        states = _states(factory)
        sent_by_then = len(handler.bodies)

        again = _start(env, tmp_path, "run-again", "run")
        _wait(lambda: len(handler.bodies) >= sent_by_then + 20, 60, "the restart sent twenty")
        handler.faults = lambda recipient, attempt: Fault("data", "250 OK", stall=30)  # replies that take long
        time.sleep(1)
        again.send_signal(signal.SIGINT)  # the stop waits for those replies (DIGEST__STOP_SECONDS) ...
        time.sleep(0.5)
        twice_asked = time.monotonic()
        second = _stopped(again, signal.SIGINT, seconds=60)  # ... unless asked again
        second_took = time.monotonic() - twice_asked
        handler.faults = None

        last = _start(env, tmp_path, "run-last", "run")
        _wait(lambda: _settled(factory, total), 120, "the restart sent the rest")
        assert _stopped(last) == 0
    engine.dispose()
    log = (tmp_path / "run.log").read_text(errors="replace")
    print(f"\nstop: exit {code} in {took:.1f} s after {sent_by_then} messages, {dict(states)}; second Ctrl-C: {second}")
    assert code == 0 and took < 15
    assert "stop asked (SIGINT)" in log and "stopping: " in log and " given back" in log
    assert states["sending"] == 0  # nothing held: what was not on the wire is due again at once
    assert states["queued"] >= total - sent_by_then - 2
    assert second == 130 and second_took < 5
    assert _twice(handler) == {}  # what the second Ctrl-C left on the wire is unknown, never sent again
    # At most what was on the wire (the pool's two), the marks written ahead (0.2 s of the
    # relay's pace, at least one a connection) and the answers not yet recorded (0.2 s).
    assert _states(factory)["unknown"] <= 2 + 4 + 4
    assert "Traceback" not in log
