"""``digestbot serve`` under abuse, as deployed (a separate process): stalled and
half-sent requests, a process short of file descriptors, forged X-Forwarded-For
headers, clients that leave in the middle of a body.  Whatever they do, a one-click
unsubscribe from someone else is answered at once."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bot.domain import SubscriberStatus
from bot.store.consents import consents_of
from bot.store.engine import make_engine, sessions
from bot.store.subscribers import get_subscriber
from bot.tokens import make_token
from bot.tools.sink import free_port
from tests.helpers import DIGESTBOT, Cli, wait_until_serving

KEY = "serve-limits-signing-key-0123456789"


@dataclass
class Served:
    url: str
    port: int
    folder: Path
    process: subprocess.Popen[str]
    env: dict[str, str]

    def cli(self, *args: str) -> str:
        return Cli(self.folder, self.env, placed=False)(*args).stdout

    def token(self, email: str) -> str:
        self.cli("subscribers", "add", email)
        return self.token_of(email)

    def token_of(self, email: str) -> str:
        engine = make_engine(f"sqlite:///{self.folder / 'var' / 'digestbot.sqlite3'}")
        with sessions(engine)() as session:
            found = get_subscriber(session, email)
        engine.dispose()
        assert found is not None
        return make_token(KEY.encode(), found.id, found.unsubscribe_secret)

    def status(self, email: str) -> SubscriberStatus:
        engine = make_engine(f"sqlite:///{self.folder / 'var' / 'digestbot.sqlite3'}")
        with sessions(engine)() as session:
            found = get_subscriber(session, email)
        engine.dispose()
        assert found is not None
        return found.status


@contextmanager
def serving(folder: Path, *, files: int | None = None, **web: str) -> Iterator[Served]:
    """``digestbot serve`` with these ``web.*`` settings (and at most *files* open files);
    its log is checked for tracebacks when it stops."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env |= {
        "DIGESTBOT_PATHS__VAR_DIR": str(folder / "var"),
        "DIGESTBOT_WEB__SIGNING_KEY": KEY,
        "DIGESTBOT_WEB__PUBLIC_URL": f"http://127.0.0.1:{port}",
        "DIGESTBOT_WEB__SIGNUP": "true",
        "DIGESTBOT_SMTP__PORT": str(free_port()),  # nobody listens: sign-up mail is not sent
    }
    env |= {f"DIGESTBOT_WEB__{name.upper()}": value for name, value in web.items()}

    def limit() -> None:
        if files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "serve.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [DIGESTBOT, "serve", "--port", str(port)],
            cwd=folder,
            env=env,
            stdout=sink,
            stderr=sink,
            text=True,
            preexec_fn=limit,
        )
    try:
        wait_until_serving(process, port)
        yield Served(f"http://127.0.0.1:{port}", port, folder, process, env)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def _stalled(port: int, count: int, start: bytes) -> list[socket.socket]:
    """*count* connections from another loopback address that send *start* and stop."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.2", 0))
        sock.connect(("127.0.0.1", port))
        if start:
            sock.sendall(start)
        held.append(sock)
    return held


def _still_open(sockets: list[socket.socket], seconds: float) -> list[socket.socket]:
    """Those of *sockets* the server has not closed (or answered 408) within *seconds*."""
    deadline = time.monotonic() + seconds
    waiting = list(sockets)
    while waiting and time.monotonic() < deadline:
        waiting = [sock for sock in waiting if not _closed_by_server(sock)]
    return waiting


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        data = sock.recv(200)
    except TimeoutError:
        return False
    except OSError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 408")


@pytest.mark.timing
def test_stalled_requests_never_lock_out_a_one_click_unsubscribe(tmp_path: Path) -> None:
    """300 half-sent requests against a process that may open 256 files: the one-click
    POST after them is answered at once (today's main: "Server disconnected")."""
    with serving(tmp_path, files=256, header_timeout_seconds="3") as served:
        token = served.token("ada@example.org")
        held = _stalled(served.port, 150, b"POST /u/" + token.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Le")
        held += _stalled(served.port, 150, b"")
        started = time.monotonic()
        answer = httpx.post(
            f"{served.url}/u/{token}",
            content=b"List-Unsubscribe=One-Click",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            timeout=10,
        )
        took = time.monotonic() - started
        assert answer.status_code == 200 and "You are unsubscribed" in answer.text
        assert took < 2, f"the one-click POST waited {took:.1f} s behind stalled connections"
        assert httpx.get(f"{served.url}/healthz", timeout=5).text == "ok"
        # The stalled ones are closed once their headers are overdue (3 s), with a 408 where
        # they started; a busy machine may take a moment longer to get to the last ones.
        time.sleep(3)
        assert len(_still_open(held, 5)) == 0
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 10
        while served.status("ada@example.org") is not SubscriberStatus.UNSUBSCRIBED:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_headers_that_never_end_are_refused(tmp_path: Path) -> None:
    with serving(tmp_path) as served:
        sock = socket.create_connection(("127.0.0.1", served.port))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            for n in range(5000):
                sock.sendall(b"X-Filler-%d: %s\r\n" % (n, b"a" * 64))
        except OSError:
            pass  # closed by the server, as it should be
        sock.settimeout(5)
        try:
            answer = sock.recv(200)
        except OSError:
            answer = b""
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer
        sock.close()
        assert httpx.get(f"{served.url}/healthz", timeout=5).text == "ok"


def _sign_up(served: Served, email: str, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(base_url=served.url, timeout=10) as client:
        form = client.get("/subscribe")
        csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        return client.post(
            "/subscribe",
            data={"csrf": csrf, "email": email, "tag": "*", "cadence": "daily", "timezone": "UTC", "send_hour": "8"},
            headers=headers,
        )


def test_x_forwarded_for_counts_only_from_a_trusted_proxy(tmp_path: Path) -> None:
    """By default no X-Forwarded-For is believed: forged ones neither escape the sign-up
    limit nor reach the consent record (today's main believed any from 127.0.0.1)."""
    with serving(tmp_path / "direct", signups_per_hour="10") as served:
        codes = [
            _sign_up(served, f"p{n}@example.org", {"X-Forwarded-For": f"198.51.100.{n}"}).status_code for n in range(14)
        ]
        assert codes == [200] * 10 + [429] * 4
        forged = _sign_up(served, "q@example.org", {"X-Forwarded-For": "ID checked)"})
        assert forged.status_code == 429
        engine = make_engine(f"sqlite:///{served.folder / 'var' / 'digestbot.sqlite3'}")
        with sessions(engine)() as session:
            first = get_subscriber(session, "p0@example.org")
            assert first is not None
            assert [e.client for e in consents_of(session, first.id)] == ["127.0.0.1"]
        engine.dispose()


def test_a_trusted_proxy_names_the_client(tmp_path: Path) -> None:
    with serving(tmp_path, trusted_proxies='["127.0.0.1"]', signups_per_hour="2") as served:
        first = _sign_up(served, "a@example.org", {"X-Forwarded-For": "203.0.113.7"})
        second = _sign_up(served, "b@example.org", {"X-Forwarded-For": "ID checked)"})
        assert (first.status_code, second.status_code) == (200, 200)
        # Each client has its own budget behind the proxy.
        assert [
            _sign_up(served, "c@example.org", {"X-Forwarded-For": "203.0.113.8"}).status_code for _ in range(3)
        ] == [
            200,
            200,
            429,
        ]
        engine = make_engine(f"sqlite:///{served.folder / 'var' / 'digestbot.sqlite3'}")
        with sessions(engine)() as session:
            clients = {}
            for email in ("a@example.org", "b@example.org"):
                found = get_subscriber(session, email)
                assert found is not None
                clients[email] = [e.client for e in consents_of(session, found.id)]
        engine.dispose()
        # A value that is not an address is never stored.
        assert clients == {"a@example.org": ["203.0.113.7"], "b@example.org": [""]}


@pytest.mark.slow
def test_a_client_that_leaves_mid_body_costs_no_traceback(tmp_path: Path) -> None:
    """Ten aborted POSTs of each form (today's main: 44 log lines each, with a traceback)."""
    with serving(tmp_path) as served:
        token = served.token("ada@example.org")
        log = served.folder / "serve.log"
        before = log.read_text().count("\n")
        for path in ("/subscribe", f"/m/{token}", f"/u/{token}", f"/c/{token}"):
            for _ in range(10):
                sock = socket.create_connection(("127.0.0.1", served.port))
                sock.sendall(
                    f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 10000\r\n\r\nemail=a".encode()
                )
                time.sleep(0.05)
                sock.close()
        time.sleep(0.5)
        assert httpx.get(f"{served.url}/healthz", timeout=5).text == "ok"
        written = log.read_text().splitlines()[before:]
        assert len(written) <= 40 and not any("Traceback" in line or "ERROR" in line for line in written), written
        assert served.status("ada@example.org") is SubscriberStatus.ACTIVE


@pytest.mark.timing
def test_one_click_answers_at_once_while_the_worst_upload_is_read(tmp_path: Path) -> None:
    """Bursts of one-click unsubscribes while a 4.9 MB upload of the slowest shape is
    read, taking turns with bursts without it: the median round's p99 within 250 ms, or
    within half as much again as without the upload in this run (on two busy cores a burst
    alone reaches 150 to 350 ms), and none waits a second.  Each burst follows the same
    pause, and a small upload first warms what a process does once (the form parser's
    import): with nothing else running, one burst's p99 swung from 89 to 309 ms between
    bursts, and a single slow round (421 ms among 113 to 166) outweighed the rest when
    the rounds' answers were pooled.  An upload read on the event loop holds every
    round's answers for seconds (a 100 KB upload once held /u/ for 32 s)."""
    import asyncio
    import statistics
    import threading

    rounds = 5
    with serving(tmp_path) as served:
        emails = [f"reader{n}@example.org" for n in range(20 * (1 + 2 * rounds))]
        (tmp_path / "people.csv").write_text("email\n" + "\n".join([*emails, "uploader@example.org"]) + "\n")
        served.cli("subscribers", "import", str(tmp_path / "people.csv"))
        tokens = [served.token_of(email) for email in emails]
        readers = iter([tokens[n : n + 20] for n in range(0, len(tokens), 20)])  # each burst unsubscribes its own
        manage = f"{served.url}/m/{served.token_of('uploader@example.org')}"
        form = httpx.get(manage).text.split('name="form" value="', 1)[1].split('"', 1)[0]

        async def burst(readers: list[str]) -> list[float]:
            """200 one-click POSTs at concurrency 20 for these 20 readers, each unsubscribing."""
            async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
                gate = asyncio.Semaphore(20)

                async def one(token: str) -> float:
                    async with gate:
                        started = time.perf_counter()
                        answer = await client.post(
                            f"/u/{token}",
                            content=b"List-Unsubscribe=One-Click",
                            headers={"Content-Type": "application/x-www-form-urlencoded"},
                        )
                        assert answer.status_code == 200
                        return time.perf_counter() - started

                return await asyncio.gather(*(one(readers[n % len(readers)]) for n in range(200)))

        def p99(latencies: list[float]) -> float:
            return statistics.quantiles(latencies, n=100)[98]

        worst = b"@article{k, title " + b"=" * 4_900_000 + b"}"  # the slowest shape per byte: about 8 s
        uploads: list[httpx.Response] = []

        def upload() -> None:
            files = {"library": ("big.bib", worst, "text/plain")}
            uploads.append(httpx.post(f"{manage}?form={form}", data={"form": form}, files=files, timeout=120))

        def burst_after_a_pause(*, uploading: bool) -> list[float]:
            sender = threading.Thread(target=upload if uploading else lambda: None)
            sender.start()
            time.sleep(1.5)  # the body is in; its reading has begun
            latencies = asyncio.run(burst(next(readers)))
            reading = sender.is_alive()
            sender.join(120)
            assert reading or not uploading, "the upload was read before the burst ended: the test measured nothing"
            return latencies

        asyncio.run(burst(next(readers)))  # warm: the first requests of a process compile its queries
        small = {"library": ("small.bib", b"@article{k, title = {Warm}}", "text/plain")}
        assert httpx.post(f"{manage}?form={form}", data={"form": form}, files=small, timeout=60).status_code == 200
        alone: list[list[float]] = []
        during: list[list[float]] = []
        for _ in range(rounds):
            alone.append(burst_after_a_pause(uploading=False))
            during.append(burst_after_a_pause(uploading=True))
        usual = statistics.median(p99(each) for each in alone)
        loaded = statistics.median(p99(each) for each in during)
        shown = ", ".join(f"{p99(a) * 1000:.0f}/{p99(d) * 1000:.0f}" for a, d in zip(alone, during, strict=True))
        medians = f"{usual * 1000:.0f}/{loaded * 1000:.0f}"
        print(f"\none-click bursts, p99 alone/during a 4.9 MB upload: {shown} ms; median rounds {medians} ms")
        assert loaded < max(0.25, usual * 1.5), f"p99 {loaded * 1000:.0f} ms ({usual * 1000:.0f} ms alone)"
        slowest = max(max(each) for each in during)
        assert slowest < 1.0, f"a one-click POST waited {slowest:.1f} s"
        assert [u.status_code for u in uploads] == [200] * rounds, [u.text[-500:] for u in uploads]


def test_an_attackers_misses_never_refuse_a_readers_valid_token(tmp_path: Path) -> None:
    """Item 11: after 218 forged tokens from one address, valid /u/ and /f/ requests from
    it got 429: behind a proxy, one attacker denied every reader's one-click unsubscribe."""
    with serving(tmp_path, misses_per_second="0.001", misses_burst="5") as served:
        token = served.token("ada@example.org")
        forged = token.split(".")[0] + ".AAAAAAAAAAAAAAAAAAAAAAAA"
        with httpx.Client(base_url=served.url, timeout=10) as client:
            codes = [client.get(f"/m/{forged}").status_code for _ in range(20)]
            assert codes == [404] * 5 + [429] * 15
            assert client.get(f"/f/{token}.atom").status_code == 200
            assert client.get(f"/m/{token}").status_code == 200
            one_click = client.post(
                f"/u/{token}",
                content=b"List-Unsubscribe=One-Click",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert one_click.status_code == 200
            assert client.get(f"/u/{forged}").status_code == 429  # misses are still limited
        deadline = time.monotonic() + 10
        while served.status("ada@example.org") is not SubscriberStatus.UNSUBSCRIBED:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request)
        sock.settimeout(10)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer:
                    break
        except OSError:
            pass
    return answer


def test_headers_past_the_limit_are_refused_however_few_reads_bring_them(tmp_path: Path) -> None:
    """Item 13: 100 KB of headers in one read got 200 where the docs say 431 past 32 KB."""
    with serving(tmp_path) as served:
        filler = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"a" * 64) for n in range(1400))
        assert len(filler) > 100_000
        answer = _raw(served.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + filler + b"\r\n")
        assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
        under = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"a" * 64) for n in range(300))
        answer = _raw(served.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + under + b"Connection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
        # A body of any size after small headers is the app's to judge, not a header.
        body = b"List-Unsubscribe=One-Click" + b"&x=" + b"y" * 60_000
        head = b"POST /u/1.AAAAAAAAAAAAAAAAAAAAAAAA HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        head += b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n" % len(body)
        assert not _raw(served.port, head + body).startswith(b"HTTP/1.1 431")


@pytest.mark.slow
def test_uploads_are_refused_before_their_bodies_are_read(tmp_path: Path) -> None:
    """Item 10: 150 parallel 5 MB uploads from a reader already limited all got 429, but
    serve grew from 155 MB to a 438 MB peak.  Every refusal is made from the headers and
    the store, and the bytes of upload bodies held at once are bounded for the server."""
    from concurrent.futures import ThreadPoolExecutor

    def rss_mb(pid: int) -> float:
        with open(f"/proc/{pid}/status") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024

    with serving(tmp_path) as served:
        manage = f"{served.url}/m/{served.token('uploader@example.org')}"
        form = httpx.get(manage).text.split('name="form" value="', 1)[1].split('"', 1)[0]
        file = {"library": ("big.bib", b"%" * 4_900_000, "text/plain")}
        for _ in range(10):  # the reader's hourly allowance, used up
            assert httpx.post(f"{manage}?form={form}", files={"library": ("x.bib", b"24\n")}, timeout=60).status_code
        before = rss_mb(served.process.pid)

        def post(address: str) -> int:
            return httpx.post(address, data={"form": form}, files=file, timeout=120).status_code

        with ThreadPoolExecutor(50) as pool:
            limited = list(pool.map(post, [f"{manage}?form={form}"] * 100))
            forged = list(pool.map(post, [f"{manage}?form={'0' * 32}"] * 50))
        grown = rss_mb(served.process.pid) - before
        assert limited == [429] * 100 and forged == [403] * 50
        assert grown < 60, f"the peak grew by {grown:.0f} MB"
        assert httpx.get(f"{served.url}/healthz", timeout=5).text == "ok"


def test_a_refused_upload_is_answered_to_a_client_that_sends_the_whole_file_first(tmp_path: Path) -> None:
    """A browser or curl sends the whole body before it reads the answer: a refusal made
    from the headers reached them as a connection reset, never as the page saying why."""
    import http.client
    from urllib.parse import urlsplit

    with serving(tmp_path) as served:
        manage = f"{served.url}/m/{served.token('uploader@example.org')}"
        form = httpx.get(manage).text.split('name="form" value="', 1)[1].split('"', 1)[0]
        for _ in range(10):  # the reader's hourly allowance, used up
            httpx.post(f"{manage}?form={form}", files={"library": ("x.bib", b"24\n")}, timeout=60)
        boundary = "b" * 20
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="library"; filename="big.bib"\r\n'
                "Content-Type: text/plain\r\n\r\n"
            ).encode()
            + b"%" * 4_900_000
            + f"\r\n--{boundary}--\r\n".encode()
        )
        where = urlsplit(manage)
        answers = []
        for _ in range(5):
            connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
            connection.request(
                "POST",
                f"{where.path}?form={form}",
                body=body,
                headers={"content-type": f"multipart/form-data; boundary={boundary}", "origin": served.url},
            )
            response = connection.getresponse()
            answers.append((response.status, "files in the last hour" in response.read().decode()))
            connection.close()
        assert answers == [(429, True)] * 5
