"""A real Matrix homeserver for the tests: Synapse, from PyPI, in a virtualenv of its own
(``make test`` makes ``.venv/synapse``; ``DIGESTBOT_TEST_SYNAPSE`` names another
Python that has it), on SQLite, started as a process on a free port with a user and a
room; and a proxy in front of it that can drop the connection after a ``PUT`` reached
the homeserver, the answer unseen."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

ROOT = Path(__file__).resolve().parents[1]


def synapse_python() -> Path | None:
    """The Python that runs Synapse, or None (the test says why it skips)."""
    named = os.environ.get("DIGESTBOT_TEST_SYNAPSE")
    candidate = Path(named) if named else ROOT / ".venv" / "synapse" / "bin" / "python"
    if not candidate.exists():
        return None
    found = subprocess.run([candidate, "-c", "import synapse"], capture_output=True, check=False)
    return candidate if found.returncode == 0 else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Homeserver:
    url: str
    token: str
    room: str

    def events(self) -> list[dict[str, Any]]:
        """The room's messages, oldest first, as a client reads them back."""
        path = f"/_matrix/client/v3/rooms/{quote(self.room, safe='')}/messages?dir=b&limit=100"
        answer = httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)
        answer.raise_for_status()
        chunk = answer.json()["chunk"]
        return [event for event in reversed(chunk) if event["type"] == "m.room.message"]


def _config(python: Path, folder: Path, port: int) -> Path:
    config = folder / "homeserver.yaml"
    subprocess.run(
        [python, "-m", "synapse.app.homeserver", "--server-name", "localhost", "--config-path", str(config),
         "--data-directory", str(folder), "--generate-config", "--report-stats=no"],
        cwd=folder, capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    config.write_text(config.read_text().replace("port: 8008", f"port: {port}").replace("    - ::1\n", ""))
    (folder / "limits.yaml").write_text(
        "trusted_key_servers: []\n"
        "suppress_key_server_warning: true\n"
        "rc_message:\n  per_second: 1000\n  burst_count: 1000\n"
        "rc_login:\n  address:\n    per_second: 1000\n    burst_count: 1000\n"
        "  account:\n    per_second: 1000\n    burst_count: 1000\n"
    )
    return config


@contextmanager
def synapse(folder: Path) -> Iterator[Homeserver]:
    """Synapse started in *folder*, a user ``bot`` logged in and a room made; stopped after."""
    python = synapse_python()
    assert python is not None
    port = _free_port()
    config = _config(python, folder, port)
    log = (folder / "synapse.out").open("w")
    process = subprocess.Popen(
        [python, "-m", "synapse.app.homeserver", "--config-path", str(config),
         "--config-path", str(folder / "limits.yaml")],
        cwd=folder, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(url, process, folder)
        subprocess.run(
            [python, "-m", "synapse._scripts.register_new_matrix_user", "-u", "bot", "-p", "bot-password", "--admin",
             "-c", str(config), url],
            capture_output=True, check=True, timeout=120,
        )  # fmt: skip
        login = {
            "type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": "bot"},
            "password": "bot-password",
        }
        token = httpx.post(url + "/_matrix/client/v3/login", json=login, timeout=30).json()["access_token"]
        made = httpx.post(
            url + "/_matrix/client/v3/createRoom",
            json={"name": "papers"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        made.raise_for_status()
        yield Homeserver(url, token, made.json()["room_id"])
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_for(url: str, process: subprocess.Popen[bytes], folder: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Synapse stopped: {(folder / 'synapse.out').read_text()[-2000:]}")
        try:
            if httpx.get(url + "/_matrix/client/versions", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("Synapse did not answer within 120 s")


class DroppingProxy(ThreadingHTTPServer):
    """Forwards every request to *target*; with ``drop_next_put`` set, the next PUT is
    forwarded and answered by the homeserver, and its connection closed unanswered."""

    daemon_threads = True

    def __init__(self, target: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.target = target
        self.drop_next_put = False
        self.dropped = 0
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    server: DroppingProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def do_PUT(self) -> None:
        self._forward()

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
        answer = httpx.request(self.command, self.server.target + self.path, content=body, headers=headers, timeout=30)
        if self.command == "PUT" and self.server.drop_next_put:
            self.server.drop_next_put = False
            self.server.dropped += 1
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)
