"""A local server that speaks the Zotero Web API v3 as its published documents describe
it (https://www.zotero.org/support/dev/web_api/v3/), for the tests and the bench to run
as a process of its own: ``python -m tests.zotero_server`` prints its port.

What it speaks: ``/keys/current``; per library (``/users/ID``, ``/groups/ID``) a version
that every write raises, ``Last-Modified-Version`` on every answer, 304 to
``If-Modified-Since-Version``, ``/items/top`` and ``/items`` with ``since``,
``format=versions``, ``itemKey``, ``includeTrashed``, ``q``/``qmode``, ``limit``/``start``
with ``Link`` and ``Total-Results``, ``/deleted?since``, ``/collections``, and writes
(``POST /items``) with ``Zotero-Write-Token`` (412 when used again) answered with
per-object ``successful``/``success``/``unchanged``/``failed``; ``Backoff`` and 429 or 503
with ``Retry-After``.  Its hostile modes, set through ``POST /_control``: hang, dribble,
a 10 MB page, HTML instead of JSON, a redirect, a version going backwards, 403 after N
requests, a page that repeats an item, and a write whose answer is lost after the item
was made.  ``GET /_state`` counts what it was asked and holds what it keeps.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.server_process import start_server, stop_server

KEY_LETTERS = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"


@dataclass
class Library:
    version: int = 0
    items: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> data (with version)
    deleted: dict[str, int] = field(default_factory=dict)  # key -> version it was deleted at
    collections: dict[str, dict[str, Any]] = field(default_factory=dict)


class _State:
    def __init__(self, seed: int) -> None:
        self.lock = threading.Lock()
        self.random = random.Random(seed)
        self.libraries: dict[str, Library] = {}
        self.keys: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}  # write token -> the key of the item it made
        self.modes: dict[str, Any] = {}
        self.requests: dict[str, int] = {}
        self.keys_seen_elsewhere = 0  # requests with a key at a path no API answers
        self.in_flight = 0
        self.most_in_flight = 0
        self.stopping = threading.Event()

    def library(self, path: str) -> Library:
        return self.libraries.setdefault(path, Library())

    def new_key(self) -> str:
        return "".join(self.random.choice(KEY_LETTERS) for _ in range(8))

    def count(self, kind: str) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + 1


def _control(state: _State, order: dict[str, Any]) -> Any:  # noqa: C901 - one branch an order
    op = order["op"]
    if op == "key":
        state.keys[order["key"]] = {
            "key": order["key"],
            "userID": order.get("user_id", 1),
            "username": order.get("username", "reader"),
            "access": {
                "user": {"library": True, "files": True, "notes": True, "write": order.get("write", True)},
                "groups": {str(g): {"library": True, "write": w} for g, w in order.get("groups", {}).items()},
            },
        }
        return {}
    if op == "revoke":
        state.keys.pop(order["key"], None)
        return {}
    if op == "mode":
        state.modes[order["name"]] = order.get("value", True)
        return {}
    if op == "calm":
        state.modes.clear()
        return {}
    library = state.library(order.get("library", "users/1"))
    if op == "add":
        library.version += 1
        made = []
        for fields in order["items"]:
            key = fields.get("key") or state.new_key()
            data = {"key": key, "version": library.version, "itemType": "journalArticle", "title": "", **fields}
            data.setdefault("collections", [])
            data.setdefault("deleted", 0)
            library.items[key] = data
            made.append(key)
        return {"keys": made, "version": library.version}
    if op == "bulk":  # many items at once, for the bench
        library.version += 1
        start = len(library.items)
        for n in range(order["count"]):
            key = state.new_key()
            library.items[key] = {
                "key": key,
                "version": library.version,
                "itemType": "preprint",
                "title": f"Bulk paper {start + n} on sparse attention kernels",
                "abstractNote": "A paper made in bulk to measure a sync.",
                "url": f"https://arxiv.org/abs/2501.{start + n:05d}",
                "collections": [],
                "deleted": 0,
            }
        return {"version": library.version}
    if op == "change":
        library.version += 1
        for key in order["keys"]:
            library.items[key].update(order.get("fields", {}), version=library.version)
        return {"version": library.version}
    if op == "delete":
        library.version += 1
        for key in order["keys"]:
            library.items.pop(key, None)
            library.deleted[key] = library.version
        return {"version": library.version}
    if op == "collection":
        library.version += 1
        key = state.new_key()
        library.collections[key] = {"key": key, "version": library.version, "name": order["name"]}
        return {"key": key}
    if op == "back":  # the server restored from an older backup
        library.version = max(0, library.version - order.get("by", 5))
        return {"version": library.version}
    raise ValueError(op)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms wait for the ACK between

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def _answer(self, method: str) -> None:
        state = self.server.state
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        if parts.path == "/_control":
            with state.lock:
                self._json(200, _control(state, json.loads(body)))
            return
        if parts.path == "/_requests":  # the counts alone: cheap beside a library of 100,000 items
            with state.lock:
                self._json(200, dict(state.requests))
            return
        if parts.path == "/_state":
            with state.lock:
                self._json(200, self._state())
            return
        if parts.path.startswith("/elsewhere"):
            if self.headers.get("Zotero-API-Key"):
                state.keys_seen_elsewhere += 1
            self._json(200, {})
            return
        with state.lock:
            state.in_flight += 1
            state.most_in_flight = max(state.most_in_flight, state.in_flight)
        try:
            if self._hostile(parts.path):
                return
            with state.lock:
                self._api(method, parts.path, query, body)
        finally:
            with state.lock:
                state.in_flight -= 1

    def _state(self) -> dict[str, Any]:
        state = self.server.state
        return {
            "requests": dict(state.requests),
            "keys_seen_elsewhere": state.keys_seen_elsewhere,
            "most_in_flight": state.most_in_flight,
            "libraries": {
                path: {"version": lib.version, "items": list(lib.items.values())}
                for path, lib in state.libraries.items()
            },
        }

    def _hostile(self, path: str) -> bool:
        """True when a hostile mode answered (or did not answer) the request."""
        state, modes = self.server.state, self.server.state.modes
        with state.lock:
            state.count("asked")
            if "forbid_after" in modes:
                modes["forbid_after"] -= 1
                if modes["forbid_after"] < 0:
                    self._json(403, "Forbidden")
                    return True
            busy = modes.get("busy")
            if busy and busy["times"] > 0:
                busy["times"] -= 1
                self._send(busy.get("status", 429), b"Too many requests", {"Retry-After": str(busy["after"])})
                return True
        if modes.get("hang"):
            state.stopping.wait(modes.get("hang_seconds", 60))
            self.close_connection = True
            return True
        if modes.get("dribble"):
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.send_header("Last-Modified-Version", "1")
            self.end_headers()
            for _ in range(600):
                if state.stopping.wait(0.1):
                    break
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    break
            self.close_connection = True
            return True
        if modes.get("big"):
            self._send(200, b"[" + b" " * 10_000_000 + b"]", {"Last-Modified-Version": "1"})
            return True
        if modes.get("html"):
            self._send(200, b"<html><body>Service unavailable</body></html>", {"Content-Type": "text/html"})
            return True
        if modes.get("redirect"):
            port = self.server.server_address[1]
            self._send(302, b"", {"Location": f"http://127.0.0.1:{port}/elsewhere{path}"})
            return True
        return False

    def _api(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:  # noqa: C901
        state = self.server.state
        if path == "/keys/current":
            state.count("keys")
            found = state.keys.get(self.headers.get("Zotero-API-Key", ""))
            if found is None:
                self._json(403, "Invalid key")
            else:
                self._json(200, found)
            return
        segments = path.strip("/").split("/")
        if len(segments) < 3 or segments[0] not in ("users", "groups"):
            self._json(404, "Not found")
            return
        library_path = "/".join(segments[:2])
        if not self._allowed(library_path, write=method == "POST"):
            self._json(403, "Forbidden")
            return
        library = state.library(library_path)
        rest = segments[2:]
        version = library.version
        if state.modes.get("backwards"):
            version = max(0, version - 3)
        headers = {"Last-Modified-Version": str(version)}
        if state.modes.get("backoff"):
            headers["Backoff"] = str(state.modes["backoff"])
        asked_version = self.headers.get("If-Modified-Since-Version")
        if method == "POST" and rest == ["items"]:
            self._write(library, body, headers)
            return
        if asked_version and asked_version.isdigit() and library.version <= int(asked_version):
            state.count("304")
            self._send(304, b"", headers)
            return
        since = int(query.get("since", "0") or 0)
        trashed = query.get("includeTrashed") == "1"
        if rest in (["items"], ["items", "top"]):
            if "itemKey" in query:
                wanted = query["itemKey"].split(",")
                if len(wanted) > 50:
                    self._json(400, "Too many keys")
                    return
                items = [library.items[k] for k in wanted if k in library.items]
            else:
                items = [i for i in library.items.values() if i["version"] > since and (trashed or not i["deleted"])]
                if state.modes.get("repeat") and items:
                    items = [*items, items[0]]
            if "q" in query:
                words = query["q"].lower()
                items = [i for i in items if any(words in str(v).lower() for v in i.values())]
            if query.get("format") == "versions":
                state.count("versions")
                self._json(200, {i["key"]: i["version"] for i in items}, headers)
                return
            state.count("items")
            self._paged([{"key": i["key"], "version": i["version"], "data": i} for i in items], query, path, headers)
            return
        if rest == ["deleted"]:
            state.count("deleted")
            gone = [k for k, v in library.deleted.items() if v > since]
            self._json(200, {"collections": [], "searches": [], "items": gone, "tags": [], "settings": []}, headers)
            return
        if rest == ["collections"]:
            state.count("collections")
            found = [{"key": c["key"], "version": c["version"], "data": c} for c in library.collections.values()]
            self._paged(found, query, path, headers)
            return
        self._json(404, "Not found")

    def _allowed(self, library_path: str, *, write: bool) -> bool:
        found = self.server.state.keys.get(self.headers.get("Zotero-API-Key", ""))
        if found is None:
            return False
        kind, number = library_path.split("/")
        access = found["access"]
        if kind == "users":
            return str(found["userID"]) == number and (not write or access["user"]["write"])
        rights = access["groups"].get(number) or access["groups"].get("all")
        return bool(rights) and (not write or rights["write"])

    def _paged(self, found: list[Any], query: dict[str, str], path: str, headers: dict[str, str]) -> None:
        limit = min(100, int(query.get("limit", "25") or 25))
        start = int(query.get("start", "0") or 0)
        page = found[start : start + limit]
        headers = {**headers, "Total-Results": str(len(found))}
        if start + limit < len(found):
            port = self.server.server_address[1]
            headers["Link"] = f'<http://127.0.0.1:{port}{path}?limit={limit}&start={start + limit}>; rel="next"'
        self._json(200, page, headers)

    def _write(self, library: Library, body: bytes, headers: dict[str, str]) -> None:
        state = self.server.state
        state.count("writes")
        token = self.headers.get("Zotero-Write-Token", "")
        if token and token in state.tokens:
            state.count("412")
            self._json(412, "Write token already used", headers)
            return
        objects = json.loads(body)
        successful, success, failed = {}, {}, {}
        library.version += 1
        for n, data in enumerate(objects):
            if not isinstance(data, dict) or not data.get("itemType"):
                failed[str(n)] = {"key": "", "code": 400, "message": "'itemType' property not provided"}
                continue
            key = state.new_key()
            made = {**data, "key": key, "version": library.version, "deleted": 0}
            library.items[key] = made
            successful[str(n)] = {"key": key, "version": library.version, "data": made}
            success[str(n)] = key
        if token:
            state.tokens[token] = next(iter(success.values()), "")
        headers = {**headers, "Last-Modified-Version": str(library.version)}
        lose = state.modes.get("lose_writes", 0)
        if lose:
            state.modes["lose_writes"] = lose - 1
            state.count("lost")
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)  # made, and the answer never sent
            return
        self._json(200, {"successful": successful, "success": success, "unchanged": {}, "failed": failed}, headers)

    def _json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(value).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if status != 304:
            self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, seed: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.state = _State(seed)


class ZoteroServer:
    """The server as a process, and its control."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process, self.port = process, port
        self.url = f"http://127.0.0.1:{port}"
        self._client = httpx.Client(base_url=self.url, timeout=30)
        self._keys = itertools.count(1)

    def control(self, op: str, **values: Any) -> Any:
        answer = self._client.post("/_control", json={"op": op, **values})
        answer.raise_for_status()
        return answer.json()

    def state(self) -> dict[str, Any]:
        return self._client.get("/_state").json()

    def requests(self, kind: str = "asked") -> int:
        return int(self._client.get("/_requests").json().get(kind, 0))

    def key(self, user_id: int = 1, *, write: bool = True, groups: dict[str, bool] | None = None) -> str:
        key = f"K{user_id:07d}X{next(self._keys):015d}"
        self.control("key", key=key, user_id=user_id, write=write, groups=groups or {})
        return key

    def items(self, library: str = "users/1") -> list[dict[str, Any]]:
        return list(self.state()["libraries"].get(library, {}).get("items", []))

    def close(self) -> None:
        self._client.close()
        stop_server(self.process)


@contextmanager
def zotero_server(seed: int = 1) -> Iterator[ZoteroServer]:
    """The server started as a process on a free port; stopped after."""
    process, port = start_server("zotero_server", "Zotero test server", "--seed", str(seed))
    server = ZoteroServer(process, port)
    try:
        yield server
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    server = _Server(args.port, args.seed)
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
