"""A local server that speaks the documented webhook and bot APIs of Slack (incoming
webhooks), Discord (execute webhook, ``?wait=true``), Mattermost (incoming webhooks),
Telegram (Bot API ``sendMessage``) and the Matrix client-server API's ``PUT
/rooms/{room}/send/m.room.message/{txnId}``, for the tests and the bench to run as a
process of its own: ``python -m tests.chat_servers`` prints its port.

Each service's shape and limits are checked as the service checks them (Discord 2,000
characters and ``allowed_mentions``, Telegram 4,096 and its HTML, Slack's 50 blocks of
3,000, Mattermost 16,383, a Matrix event 65,536 bytes and the same transaction id
answered with the same event).  Its hostile modes, set through ``POST /_control`` for
the next N requests: ``hang`` (never answers), ``accept_then_hang`` (takes the post,
then never answers), ``accept_then_drop`` (takes it, then closes the connection),
``status`` (any status, with an optional ``Retry-After`` and body), ``redirect``.
``GET /_received`` lists every post the services took, in order.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from tests.server_process import start_server, stop_server


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[dict[str, Any]] = []
        self.modes: list[dict[str, Any]] = []  # the next requests' modes, first first
        self.transactions: dict[str, str] = {}  # Matrix: (token, txn) -> event id
        self.stopping = threading.Event()

    def next_mode(self) -> dict[str, Any]:
        with self.lock:
            if not self.modes:
                return {}
            mode = self.modes[0]
            mode["times"] -= 1
            if mode["times"] <= 0:
                self.modes.pop(0)
            return mode


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _judge(service: str, payload: Any) -> str | None:
    """Why the service would refuse *payload* (400), or None."""
    if not isinstance(payload, dict):
        return "not a JSON object"
    if service == "discord":
        content = payload.get("content")
        if not isinstance(content, str) or not content or _utf16(content) > 2000:
            return "content: must be 2000 or fewer in length"
        if payload.get("allowed_mentions") != {"parse": []}:
            return "allowed_mentions must be parse []"  # what these tests require of digestbot
    elif service == "slack":
        blocks = payload.get("blocks", [])
        if len(blocks) > 50 or any(_utf16(b["text"]["text"]) > 3000 for b in blocks):
            return "invalid_blocks"
        if _utf16(payload.get("text", "")) > 40000:
            return "msg_too_long"
    elif service == "mattermost":
        if _utf16(payload.get("text", "")) > 16383:
            return "text too long"
    elif service == "telegram":
        text = payload.get("text", "")
        if _utf16(text) > 4096:
            return "Bad Request: message is too long"
        if payload.get("parse_mode") != "HTML" or not payload.get("chat_id"):
            return "Bad Request: chat not found"
    elif service == "matrix":
        if len(json.dumps(payload).encode()) > 65_536 - 1_024:
            return "M_TOO_LARGE"
        if payload.get("m.mentions") != {}:
            return "m.mentions must be {}"
    return None


def _service_of(path: str) -> str | None:
    if path.startswith("/services/"):
        return "slack"
    if path.startswith("/api/webhooks/"):
        return "discord"
    if path.startswith("/hooks/"):
        return "mattermost"
    if path.startswith("/bot") and path.endswith("/sendMessage"):
        return "telegram"
    if path.startswith("/_matrix/client/v3/rooms/"):
        return "matrix"
    return None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    def _answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/_received":
            with self.server.state.lock:
                self._answer(200, self.server.state.received)
            return
        self._answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        self._post()

    def do_PUT(self) -> None:
        self._post()

    def _post(self) -> None:
        state = self.server.state
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/_control":
            order = json.loads(body)
            with state.lock:
                if order.get("mode") == "calm":
                    state.modes.clear()
                    state.received.clear()
                    state.transactions.clear()
                else:
                    state.modes.append({"times": 1, **order})
            self._answer(200, {"ok": True})
            return
        path = self.path.partition("?")[0]
        service = _service_of(path)
        mode = state.next_mode()
        kind = mode.get("mode")
        if kind == "hang":
            state.stopping.wait(120)
            return
        if kind == "status":
            headers = {"Retry-After": str(mode["retry_after"])} if "retry_after" in mode else {}
            self._answer(int(mode["status"]), mode.get("body", {"error": "as told"}), headers)
            return
        if kind == "redirect":
            self._answer(302, {}, {"Location": "http://127.0.0.1:9/elsewhere"})
            return
        if service is None:
            self._answer(404, {"error": "no such webhook"})
            return
        try:
            payload = json.loads(body)
        except ValueError:
            self._answer(400, {"error": "not JSON"})
            return
        refused = _judge(service, payload)
        if refused:
            self._answer(400, {"error": refused, "description": refused})
            return
        answer = self._take(service, path, payload)
        if kind == "accept_then_hang":
            state.stopping.wait(120)
            return
        if kind == "accept_then_drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self._answer(200, answer)

    def _take(self, service: str, path: str, payload: dict[str, Any]) -> Any:
        state = self.server.state
        with state.lock:
            if service == "matrix":
                key = f"{self.headers.get('Authorization')} {path}"
                if key in state.transactions:
                    return {"event_id": state.transactions[key]}
                state.transactions[key] = f"$event{len(state.transactions) + 1}"
            state.received.append({"service": service, "path": path, "payload": payload})
            number = len(state.received)
        if service == "discord":
            return {"id": str(number), "content": payload["content"]}
        if service == "telegram":
            return {"ok": True, "result": {"message_id": number}}
        if service == "matrix":
            return {"event_id": state.transactions[f"{self.headers.get('Authorization')} {path}"]}
        return b"ok"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.state = _State()

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up: nothing to say
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class ChatServers:
    """The server as a process, and its control."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process, self.port = process, port
        self.url = f"http://127.0.0.1:{port}"
        self._client = httpx.Client(base_url=self.url, timeout=30)

    def control(self, mode: str, **values: Any) -> None:
        self._client.post("/_control", json={"mode": mode, **values}).raise_for_status()

    def received(self) -> list[dict[str, Any]]:
        return list(self._client.get("/_received").json())

    def close(self) -> None:
        self._client.close()
        stop_server(self.process)


@contextmanager
def chat_servers() -> Iterator[ChatServers]:
    """The server started as a process on a free port; stopped after."""
    process, port = start_server("chat_servers", "chat test server")
    server = ChatServers(process, port)
    try:
        yield server
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = _Server(args.port)
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.state.stopping.set()


if __name__ == "__main__":
    time.tzset()
    main()
