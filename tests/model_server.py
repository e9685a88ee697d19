"""A small local server that speaks the OpenAI-compatible API's request and answer shapes
(``/v1/chat/completions``, ``/v1/embeddings``), honestly or in one of the hostile ways a
model or its proxy answers.  How it answers is chosen by the request's model name."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HONEST_TLDR = "A sparse attention kernel that runs faster on GPUs."
HONEST_ANSWER = f"TL;DR: {HONEST_TLDR}"  # in the form the prompt asks for


class _Handler(BaseHTTPRequestHandler):
    server: _ModelServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.server.requests.append((self.path, dict(self.headers), body))
        model = body.get("model", "")
        if self.server.stopping.is_set():
            return
        if model == "hang":
            self.server.stopping.wait(30)
            return
        if model == "together":  # answers requests in groups of `together`, each once it is whole
            self._together()
            return
        if model == "dribble":
            self._head(200, length=10_000)
            for _ in range(100):
                if self.server.stopping.wait(0.2):
                    return
                self.wfile.write(b" ")
                self.wfile.flush()
            return
        if model == "busy":
            self._send(429, b'{"error": "slow down"}', extra={"Retry-After": "120"})
        elif model == "broken":
            self._send(500, b'{"error": "oops"}')
        elif model == "redirect":
            self._send(302, b"", extra={"Location": "http://127.0.0.1:9/elsewhere"})
        elif model == "not-json":
            self._send(200, b"<html>gateway</html>")
        elif model == "nested":
            self._send(200, b"[" * 60_000)
        elif model == "stream":
            self._send(200, b'data: {"choices": []}\n\n', content_type="text/event-stream")
        elif model == "huge":
            self._send(200, json.dumps(_chat("x" * 2_000_000)).encode())
        elif model == "wrong-shape":
            self._send(200, b'{"choices": [{"message": {"content": 42}}]}')
        elif self.path.endswith("/embeddings"):
            texts = body["input"]
            vector = (
                (lambda t, n: [0.0, 0.0, 0.0]) if model == "zero" else (lambda t, n: [float(len(t)), float(n), 1.0])
            )
            data = [{"index": n, "embedding": vector(t, n)} for n, t in enumerate(texts)]
            wrong = {  # indexes that are not 0 .. n-1 once each
                "index-zero": lambda n: 0,
                "index-repeated": lambda n: min(n, 1),
                "index-shifted": lambda n: n + 1,
                "index-true": lambda n: True if n == 1 else n,
                "index-text": lambda n: str(n),
            }
            if model in wrong:
                data = [row | {"index": wrong[model](n)} for n, row in enumerate(data)]
            self._send(200, json.dumps({"data": list(reversed(data)), "usage": {"total_tokens": 7}}).encode())
        else:
            self._send(200, json.dumps(_chat(self.server.answer)).encode())

    def _together(self) -> None:
        server = self.server
        with server.flight:
            group = server.arrived // server.together  # answered together with the rest of its group
            server.arrived += 1
            server.in_flight += 1
            server.most_in_flight = max(server.most_in_flight, server.in_flight)
            server.flight.notify_all()
            whole = (group + 1) * server.together
            server.flight.wait_for(lambda: server.arrived >= whole or server.stopping.is_set(), timeout=20)
        try:
            self._send(200, json.dumps(_chat(server.answer)).encode())
        finally:
            with server.flight:
                server.in_flight -= 1

    def _head(
        self, status: int, *, length: int, content_type: str = "application/json", extra: dict | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()

    def _send(
        self, status: int, data: bytes, *, content_type: str = "application/json", extra: dict | None = None
    ) -> None:
        self._head(status, length=len(data), content_type=content_type, extra=extra)
        self.wfile.write(data)


def _chat(content: str) -> dict[str, Any]:
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 90, "completion_tokens": 12, "total_tokens": 102},
    }


class _ModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.stopping = threading.Event()
        self.answer = HONEST_ANSWER
        self.flight = threading.Condition()
        self.together = 1  # the "together" model: requests it waits for in flight at once
        self.arrived = 0
        self.in_flight = 0
        self.most_in_flight = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@contextmanager
def model_server() -> Iterator[_ModelServer]:
    server = _ModelServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        time.sleep(0)
