"""Subscriber endpoint: the HTTP connections uvicorn holds, bounded in time and number.

uvicorn times out only idle keep-alive connections: one that never finishes its
request headers (a slowloris client, a scanner, a broken proxy) is held for ever,
and a few hundred of them use up the process's file descriptors, so the next
one-click unsubscribe cannot even be accepted.  ``GuardedHttp`` is uvicorn's
httptools protocol with three bounds: request headers must arrive within
``header_seconds`` and ``MAX_HEADER_BYTES``, and at most ``max_connections`` are
open at once; the next one closes the oldest connection that is not in the middle
of a request (waiting for headers, or idle between requests) rather than being
refused, so a flood of stalled connections cannot lock real requests out.  Request
bodies are bounded by the app (``bot.web.forms.read_body``).

Never reads a request's content and never answers one itself beyond 408 and 431.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADER_BYTES = 32_768
# File descriptors kept for what the process opens besides connections (the store, logs).
RESERVED_DESCRIPTORS = 64


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_seconds: float = 10.0
    max_connections: int = 1000


def connection_cap(wanted: int) -> int:
    """*wanted*, or fewer where the process may not open that many files."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft - RESERVED_DESCRIPTORS))


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's protocol with a header deadline, a header size and a connection cap
    (``ConnectionLimits``, read from the uvicorn config's ``digestbot_limits``).

    A request costs two attribute writes here: overdue headers are found by one sweep
    over the server's connections a few times a second (``_sweep``), not by a timer per
    request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits: ConnectionLimits = getattr(self.config, "digestbot_limits", ConnectionLimits())
        self.header_seconds = limits.header_seconds
        self.max_connections = connection_cap(limits.max_connections)
        self.header_bytes = 0
        self.header_tail = b""  # the last bytes of the headers read so far: a blank line may span two reads
        # When this connection began to wait for a request's headers; None while one is answered.
        self.waiting_since: float | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.opened_at = self.waiting_since = self.loop.time()
        if not getattr(self.server_state, "digestbot_sweeping", False):
            self.server_state.digestbot_sweeping = True  # type: ignore[attr-defined]
            self.loop.call_later(self._sweep_every(), _sweep, self.server_state, self.loop, self._sweep_every())
        if len(self.connections) > self.max_connections:
            self._make_room()

    def data_received(self, data: bytes) -> None:
        if self.waiting_since is not None and self._too_many_header_bytes(data):
            self.refuse(b"431 Request Header Fields Too Large")  # before the parser reads any of it
            return
        super().data_received(data)

    def _too_many_header_bytes(self, data: bytes) -> bool:
        """Count what *data* holds of the request's headers (all of it, or up to the
        blank line that ends them, which may have begun in the chunk before): whether
        they are now longer than ``MAX_HEADER_BYTES``, however few reads brought them."""
        seen = self.header_tail + data
        ends = [at + len(mark) for mark in (b"\r\n\r\n", b"\n\n") if (at := seen.find(mark)) >= 0]
        self.header_bytes += max(0, min(ends) - len(self.header_tail)) if ends else len(data)
        self.header_tail = seen[-3:]
        return self.header_bytes > MAX_HEADER_BYTES

    def on_headers_complete(self) -> None:
        self.waiting_since, self.header_bytes, self.header_tail = None, 0, b""
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        self.waiting_since = self.loop.time()  # the next request's headers, if any, are counted
        super().on_response_complete()

    def _sweep_every(self) -> float:
        return max(0.25, self.header_seconds / 4)

    def _make_room(self) -> None:
        """Close the oldest waiting connection, or this one when every other is busy."""
        waiting = [
            c for c in self.connections if isinstance(c, GuardedHttp) and c is not self and c.waiting_since is not None
        ]
        oldest = min(waiting, key=lambda c: c.opened_at, default=self)
        oldest.transport.close()

    def refuse(self, status: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            self.transport.close()
        self.waiting_since = None


def _sweep(server_state: Any, loop: asyncio.AbstractEventLoop, every: float) -> None:
    """Answer 408 on each connection whose request headers are overdue; again in *every* s."""
    now = loop.time()
    for connection in list(server_state.connections):
        since = getattr(connection, "waiting_since", None)
        if since is not None and now - since > connection.header_seconds:
            connection.refuse(b"408 Request Timeout")
    loop.call_later(every, _sweep, server_state, loop, every)
