"""An outside ranker over HTTP (bot.rankers.ranker_call): the example ranker started as a
process of its own, and rankers that hang, dribble, answer garbage or too much, say
they are busy, or go away mid-pass, each on a real socket on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from bot.config.services import RankerConfig
from bot.domain import LibraryPaper, RatedEntry
from bot.domain.rankers import RankerCandidate, RankerReader
from bot.rankers.protocol import PROTOCOL, REQUEST
from bot.rankers.ranker_call import RankerCall
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "rankers" / "bm25" / "ranker.py"
CANDIDATES = {
    1: RankerCandidate(
        1, "Surrogate gradients for spiking neural networks", ("Ada",), "Spiking neurons learn.", ("cs.NE",)
    ),
    2: RankerCandidate(2, "Graph databases at scale", ("Bob",), "Query planning for graphs.", ("cs.DB",)),
    3: RankerCandidate(3, "Protein folding with transformers", ("Cy",), "Structures predicted.", ("q-bio",)),
}
WHEN = __import__("datetime").datetime(2026, 11, 1)
READERS = [
    RankerReader(
        "r-neuro",
        (1, 2, 3),
        library=(
            LibraryPaper("paper:a", "Training spiking neural networks", "Spiking neurons and surrogate gradients."),
        ),
    ),
    RankerReader(
        "r-db",
        (1, 2),
        library=(LibraryPaper("paper:b", "Graph query planning", "Databases for graphs."),),
        ratings=(RatedEntry(9, "k", "Spiking chips", "less", WHEN),),
    ),
]
QUICK = RankerConfig(connect_seconds=1, answer_seconds=1.5, pass_seconds=6, attempts=3)
BACKOFF = 0.05


@pytest.fixture(scope="module")
def example_ranker() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), (
            line,
            process.stderr.read() if process.stderr else "",
        )
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(10)


def test_the_example_ranker_orders_each_reader_by_their_library(example_ranker: str) -> None:
    call = RankerCall(example_ranker, QUICK, backoff_seconds=BACKOFF)
    scores = call.scores(CANDIDATES, READERS)
    assert scores is not None and call.failure is None and call.ranked == 2
    neuro = scores["r-neuro"]
    assert max(neuro, key=lambda e: neuro[e].score) == 1 and "spiking" in neuro[1].reason
    db = scores["r-db"]
    assert db[2].score > db[1].score  # their library is graphs; "less" of a spiking chip
    assert set(neuro) == {1, 2, 3} and set(db) == {1, 2}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"protocol": "digestbot-ranker/9"}', "not digestbot-ranker/1"),
        (b"[" * 100_000 + b"]" * 100_000, ""),
        (b'{"protocol": "digestbot-ranker/1", "candidates": [{"id": 1}], "readers": []}', "title"),
        (b"\xff", ""),
        (b"[]", ""),
    ],
)
def test_the_example_ranker_answers_a_bad_request_400_and_keeps_serving(
    example_ranker: str, body: bytes, says: str
) -> None:
    import httpx

    answer = httpx.post(example_ranker, content=body, timeout=5)
    assert answer.status_code == 400 and says in answer.json()["error"]
    assert RankerCall(example_ranker, QUICK, backoff_seconds=BACKOFF).scores(CANDIDATES, READERS) is not None


# Rankers that misbehave: each a listening socket and a thread that answers as told.

Behaviour = Callable[[socket.socket, bytes], None]


def _read_request(connection: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += connection.recv(65536)
    return body


@contextmanager
def misbehaving(*behaviours: Behaviour) -> Iterator[tuple[str, list[float]]]:
    """A ranker at the URL yielded that answers its n-th connection with the n-th
    behaviour (the last one for the rest); the list gets each connection's time."""
    listener = socket.create_server(("127.0.0.1", 0))
    arrived: list[float] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            arrived.append(time.monotonic())
            behaviour = behaviours[min(len(arrived), len(behaviours)) - 1]
            threading.Thread(target=_answer, args=(connection, behaviour), daemon=True).start()

    def _answer(connection: socket.socket, behaviour: Behaviour) -> None:
        with connection:
            try:
                behaviour(connection, _read_request(connection))
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/", arrived
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def _http(status: int, body: bytes, headers: str = "") -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
    return head.encode() + body


def good(connection: socket.socket, request: bytes) -> None:
    asked = REQUEST.validate_json(request)
    readers = [
        {"id": reader["id"], "scores": [{"entry": e, "score": -e} for e in reader["candidates"]]}
        for reader in asked["readers"]
    ]
    connection.sendall(_http(200, json.dumps({"protocol": PROTOCOL, "readers": readers}).encode()))


def hangs(connection: socket.socket, request: bytes) -> None:
    time.sleep(60)


def dribbles(connection: socket.socket, request: bytes) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    for _ in range(120):
        connection.sendall(b" ")
        time.sleep(0.5)


def garbage(connection: socket.socket, request: bytes) -> None:
    connection.sendall(_http(200, b'{"protocol": "digestbot-ranker/1", "readers": [{"id": "r-neuro", "scores": NaN}]}'))


def too_much(connection: socket.socket, request: bytes) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b" " * 65536
    for _ in range(40):
        connection.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))


def says_too_much(connection: socket.socket, request: bytes) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n{")


def compressed(connection: socket.socket, request: bytes) -> None:
    connection.sendall(_http(200, b"\x1f\x8b garbage", "Content-Encoding: gzip\r\n"))


def busy(connection: socket.socket, request: bytes) -> None:
    connection.sendall(_http(503, b"{}"))


def fails(connection: socket.socket, request: bytes) -> None:
    connection.sendall(_http(500, b"{}"))


def closes(connection: socket.socket, request: bytes) -> None:
    connection.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"protocol"')


def resets(connection: socket.socket, request: bytes) -> None:
    """Closes with a reset, as a kept-alive connection the ranker closed meets the next request."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def redirects(connection: socket.socket, request: bytes) -> None:
    connection.sendall(_http(302, b"", "Location: http://127.0.0.1:1/\r\n"))


@pytest.mark.parametrize(
    ("behaviour", "says"),
    [
        (hangs, "no whole answer within 1.5 s"),
        (dribbles, "no whole answer within 1.5 s"),
        (garbage, "readers.0.scores: Input should be a valid array"),
        (too_much, "over the cap of 1,048,576 bytes"),
        (says_too_much, "answer of 99,999,999,999 bytes, over the cap"),
        (compressed, "answered compressed"),
        (busy, "answered 503 (3 attempts)"),
        (fails, "answered 500, not 200"),
        (closes, "RemoteProtocolError"),
        (redirects, "answered 302, not 200"),
    ],
    ids=lambda value: getattr(value, "__name__", None),
)
def test_a_failing_ranker_changes_nothing_but_the_order_and_ends_its_part_in_the_pass(
    behaviour: Behaviour, says: str
) -> None:
    limits = RankerConfig(connect_seconds=1, answer_seconds=1.5, pass_seconds=20, max_answer_mb=1)
    with misbehaving(behaviour) as (url, arrived):
        call = RankerCall(url, limits, backoff_seconds=BACKOFF)
        started = time.monotonic()
        assert call.scores(CANDIDATES, READERS[:1]) is None
        took = time.monotonic() - started
        assert call.scores(CANDIDATES, READERS[1:]) is None  # the rest of the pass: not asked again
        connections = len(arrived)
    assert call.failure is not None and says in call.failure, call.failure
    # Ended by its limits long before the ranker stops misbehaving (a minute): an order.
    assert "\n" not in call.failure and took < 20, took
    assert (call.skipped, call.ranked) == (2, 0)
    assert connections == (3 if behaviour in (busy, closes) else 1)


def test_a_busy_ranker_is_asked_again_after_a_back_off_and_then_used() -> None:
    with misbehaving(busy, busy, good) as (url, arrived):
        call = RankerCall(url, QUICK, backoff_seconds=BACKOFF)
        scores = call.scores(CANDIDATES, READERS)
    assert scores is not None and scores["r-db"][2].score == -2 and call.failure is None
    gaps = [later - earlier for earlier, later in zip(arrived, arrived[1:], strict=False)]
    assert len(arrived) == 3 and gaps[0] >= 0.05 and gaps[1] >= 0.1  # 0.05 s, then doubled


def test_a_reset_connection_is_asked_again_over_a_new_one() -> None:
    with misbehaving(resets, good) as (url, arrived):
        call = RankerCall(url, QUICK, backoff_seconds=BACKOFF)
        scores = call.scores(CANDIDATES, READERS)
    assert scores is not None and call.failure is None and len(arrived) == 2


def test_a_ranker_that_goes_away_mid_pass_leaves_the_rest_to_the_built_in_order() -> None:
    with misbehaving(good) as (url, _):
        call = RankerCall(url, QUICK, backoff_seconds=BACKOFF)
        assert call.scores(CANDIDATES, READERS[:1]) is not None
    assert call.scores(CANDIDATES, READERS[1:]) is None  # the port is closed now: refused, tried three times
    assert call.failure is not None and "ConnectError" in call.failure and "(3 attempts)" in call.failure
    assert (call.ranked, call.skipped) == (1, 1)


def test_the_pass_has_one_time_for_every_request() -> None:
    limits = RankerConfig(connect_seconds=1, answer_seconds=50, pass_seconds=1.5)
    with misbehaving(good, hangs) as (url, _):
        began = time.monotonic()
        call = RankerCall(url, limits, backoff_seconds=BACKOFF)
        assert call.scores(CANDIDATES, READERS[:1]) is not None
        assert call.scores(CANDIDATES, READERS[1:]) is None
        assert time.monotonic() - began < 20  # the pass's 1.5 s, not the answer's own 50 s
    assert call.failure is not None and "no whole answer" in call.failure


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "http://[::1/", "http://127.0.0.1:99999/", "not a url"])
def test_a_url_no_request_can_go_to_is_a_one_line_failure(url: str) -> None:
    call = RankerCall(url, QUICK, backoff_seconds=BACKOFF)
    assert call.scores(CANDIDATES, READERS) is None
    assert call.failure and "\n" not in call.failure and call.skipped == 2


def test_no_readers_asks_nothing() -> None:
    call = RankerCall("http://127.0.0.1:1/", QUICK, backoff_seconds=BACKOFF)
    assert call.scores(CANDIDATES, []) == {} and call.failure is None
