"""The bounded reader of outside bytes (bot.bounded_http), against a real HTTP server on
127.0.0.1: a deadline for the whole answer, a byte cap, redirects only where the
caller allows them, compression only where it asked for it, a URL's secret never in a
failure's line; and every client of an outside server goes through it."""

from __future__ import annotations

import ast
import gzip
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bot.bounded_http import (
    BROKEN,
    COMPRESSED,
    NOT_A_URL,
    TIMEOUT,
    TOO_LONG,
    UNREACHABLE,
    BoundedHttp,
    HttpFailure,
    HttpLimits,
)
from tests.conftest import ROOT

QUICK = HttpLimits(connect_seconds=1, answer_seconds=1.0, max_bytes=10_000)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *_: object) -> None:
        pass

    def _send(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path == "/ok":
            self._send(200, b"fine", X_Agent=self.headers.get("User-Agent", ""))
        elif self.path == "/moved":
            self._send(302, b"", Location="/ok")
        elif self.path == "/loop":
            self._send(302, b"", Location="/loop")
        elif self.path == "/big":
            self._send(200, b"x" * 20_000)
        elif self.path == "/big-undeclared":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(5):
                self.wfile.write(b"1000\r\n" + b"y" * 4096 + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/dribble":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.1)
        elif self.path == "/gzip":
            self._send(200, gzip.compress(b"packed"), Content_Encoding="gzip")
        elif self.path == "/not-modified":
            self._send(304, b"")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def failure_of(reader: BoundedHttp, url: str, limits: HttpLimits = QUICK) -> HttpFailure:
    with pytest.raises(HttpFailure) as raised:
        reader.request("GET", url, limits=limits)
    assert "\n" not in str(raised.value)
    return raised.value


def test_an_answer_is_read_whole_with_our_name_on_the_request(server: str) -> None:
    with BoundedHttp() as reader:
        answer = reader.request("GET", f"{server}/ok", limits=QUICK)
    assert (answer.status, answer.body) == (200, b"fine")
    assert answer.headers["X-Agent"].startswith("digestbot/")


def test_a_redirect_is_the_answer_unless_the_caller_allows_it(server: str) -> None:
    with BoundedHttp() as strict, BoundedHttp(redirects=5) as feeds:
        assert strict.request("GET", f"{server}/moved", limits=QUICK).status == 302
        assert feeds.request("GET", f"{server}/moved", limits=QUICK).body == b"fine"
        assert failure_of(feeds, f"{server}/loop").kind == BROKEN


def test_a_dribbling_server_is_cut_off_at_the_whole_answers_deadline(server: str) -> None:
    with BoundedHttp() as reader:
        failure = failure_of(reader, f"{server}/dribble")
    # Each byte comes within 0.1 s, so httpx's read timeout never fires: only the deadline
    # for the whole answer gives a timeout, long before the 10 s the body takes.
    assert failure.kind == TIMEOUT and "no whole answer within 1 s" in str(failure)


@pytest.mark.parametrize("path", ["/big", "/big-undeclared"])
def test_an_answer_over_the_cap_is_refused(server: str, path: str) -> None:
    with BoundedHttp() as reader:
        failure = failure_of(reader, server + path)
    assert failure.kind == TOO_LONG and "10,000" in str(failure)


def test_compression_is_taken_only_where_the_caller_asked_for_it(server: str) -> None:
    with BoundedHttp() as api, BoundedHttp(decoded=True) as feeds:
        assert failure_of(api, f"{server}/gzip").kind == COMPRESSED
        assert feeds.request("GET", f"{server}/gzip", limits=QUICK).body == b"packed"


def test_the_caller_sees_status_and_headers_before_the_body(server: str) -> None:
    seen: list[int] = []

    def look(status: int, headers: Mapping[str, str]) -> bool:
        seen.append(status)
        return status == 200

    with BoundedHttp() as reader:
        answer = reader.request("GET", f"{server}/not-modified", limits=QUICK, before_body=look)
    assert (seen, answer.status, answer.body) == ([304], 304, b"")


def test_a_url_nothing_listens_at_may_be_tried_again_and_hides_its_password() -> None:
    with BoundedHttp() as reader:
        failure = failure_of(reader, "http://someone:hunter2@127.0.0.1:1/feed")
    assert failure.kind == UNREACHABLE and "hunter2" not in str(failure)


@pytest.mark.parametrize("url", ["http://[::1/", "http://127.0.0.1:99999/", "not a url", "ftp://127.0.0.1/"])
def test_a_url_no_request_can_go_to_is_one_line(url: str) -> None:
    with BoundedHttp() as reader:
        assert failure_of(reader, url).kind in (NOT_A_URL, BROKEN, UNREACHABLE)


def test_no_module_but_the_reader_opens_an_http_client() -> None:
    """Every request to an outside server is bounded the one way: no other module makes
    an httpx client or request of its own."""
    opened = []
    for path in sorted((ROOT / "bot").rglob("*.py")):
        if path.name == "bounded_http.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "httpx"
                and node.attr in {"Client", "AsyncClient", "get", "post", "stream", "request"}
            ):
                opened.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert opened == []
