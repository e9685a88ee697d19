"""``/metrics`` and ``/healthz`` of the daemon (run, scheduler, worker) on a port of
their own, served from a thread with the standard library's WSGI server.

A thin shell over ``bot.metrics``; never touches the store except through the
metrics' queue collector, and never answers any other path.
"""

from __future__ import annotations

import logging
import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST

from bot.domain.routes import HEALTH, METRICS
from bot.metrics import Metrics, health

log = logging.getLogger(__name__)


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass  # a scrape every 15 s is not an event


class Exporter:
    """Serves until stopped.  *jobs* says which jobs this process must keep fresh
    (it changes when a standby scheduler becomes the leader)."""

    def __init__(
        self, metrics: Metrics, host: str, port: int, *, jobs: Callable[[], Iterable[str]], stale_after: float
    ) -> None:
        self.metrics, self.jobs, self.stale_after = metrics, jobs, stale_after
        self.server = make_server(host, port, self.app, server_class=_ThreadingServer, handler_class=_QuietHandler)
        self.port = self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == METRICS.path():
            try:
                body, status, kind = self.metrics.exposition(), "200 OK", CONTENT_TYPE_LATEST
            except Exception as exc:  # the store is down: say so, and keep serving
                log.warning("metrics unavailable: %s: %s", type(exc).__name__, exc)
                body, status, kind = b"metrics unavailable\n", "500 Internal Server Error", "text/plain"
        elif path == HEALTH.path():
            healthy, text = health(self.metrics, jobs=self.jobs(), stale_after=self.stale_after)
            body, kind = text.encode(), "text/plain; charset=utf-8"
            status = "200 OK" if healthy else "503 Service Unavailable"
        else:
            body, status, kind = b"not found\n", "404 Not Found", "text/plain"
        start_response(status, [("Content-Type", kind), ("Content-Length", str(len(body)))])
        return [body]
