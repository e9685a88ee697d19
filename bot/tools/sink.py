"""A real SMTP server on 127.0.0.1 (aiosmtpd) that keeps what it accepts.

Used by ``digestbot demo`` (writing ``var/inbox/*.eml`` and an ``index.html``)
and by the tests, which can script per-message faults (a 4xx or 5xx at RCPT or
DATA, a dropped connection during DATA, a stall) or draw them at random rates
(``FaultRates``), including a 421 greeting that refuses a whole connection.
``received`` holds a message only when the sink answers 250 on a connection that is
still open; ``bodies`` holds every message whose whole body arrived, with what became
of it (``Body.fate``), as a relay would count what reached it.  Never part of the
production send path.
"""

from __future__ import annotations

import asyncio
import email
import hashlib
import itertools
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult

from bot.files import write_whole
from bot.tools.inbox_index import InboxIndex


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, slots=True)
class Fault:
    """What the sink does for one message: ``at`` is "rcpt" or "data"."""

    at: str
    reply: str | None = None  # e.g. "451 4.3.0 try later"; None with drop/stall
    drop: bool = False  # close the connection instead of answering
    stall: float = 0.0  # seconds to wait before answering (less if the client hangs up first)


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Faults drawn at random, reproducibly: each draw hashes (seed, recipient, attempt),
    so a failing run replays exactly.  ``permanent`` is decided once per recipient
    (every attempt gets 550 or 553 at RCPT: a dead mailbox); the others per attempt."""

    greeting_421: float = 0.0  # per connection: "421" instead of "220", then close
    rcpt_4xx: float = 0.0  # 451 at RCPT
    data_4xx: float = 0.0  # 452 after DATA
    drop: float = 0.0  # connection closed after the message body, before any answer
    stall: float = 0.0  # no answer after the body for stall_seconds, or until the client hangs up
    permanent: float = 0.0
    stall_seconds: float = 5.0
    seed: int = 0

    def draw(self, *parts: object) -> float:
        digest = hashlib.blake2b(repr((self.seed, *parts)).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def is_permanent(self, recipient: str) -> bool:
        return self.draw("permanent", recipient) < self.permanent

    def __call__(self, recipient: str, attempt: int) -> Fault | None:
        """The fault for this recipient's attempt (the ``faults`` script of a SinkHandler)."""
        if self.is_permanent(recipient):
            code = "550 5.1.1 no such user" if self.draw("code", recipient) < 0.5 else "553 5.1.3 bad address"
            return Fault("rcpt", code)
        roll = self.draw("attempt", recipient, attempt)
        for rate, fault in (
            (self.rcpt_4xx, Fault("rcpt", "451 4.3.0 try again later")),
            (self.data_4xx, Fault("data", "452 4.3.1 insufficient storage")),
            (self.drop, Fault("data", drop=True)),
            (self.stall, Fault("data", "250 too late", stall=self.stall_seconds)),
        ):
            if roll < rate:
                return fault
            roll -= rate
        return None

    def refuse_greeting(self, connection: int) -> bool:
        return self.draw("greeting", connection) < self.greeting_421


async def _still_listening_after(server: SMTPServer, seconds: float) -> bool:
    """Wait up to *seconds*, or until the client hangs up; False if it did."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if server.transport is None or server.transport.is_closing():
            return False
        await asyncio.sleep(min(0.05, seconds))
    return not (server.transport is None or server.transport.is_closing())


@dataclass
class Received:
    sender: str
    recipients: list[str]
    data: bytes
    helo: str = ""  # the name the client greeted with (EHLO or HELO)

    @property
    def message(self) -> email.message.EmailMessage:
        return email.message_from_bytes(self.data, policy=default_policy)


@dataclass(frozen=True, slots=True)
class Body:
    """A message whose whole body reached the sink, and its fate: "accepted" (250 on an
    open connection), "late" (250 after the client hung up: a relay that queued it),
    "dropped" (the connection closed instead of a reply: the relay may have queued it),
    or the refusal it got ("452 ...")."""

    recipient: str
    message_id: str
    fate: str

    @property
    def delivered(self) -> bool:
        """Whether a relay would have passed it on (or may have: a drop after the body)."""
        return self.fate in ("accepted", "late", "dropped")


@dataclass
class SinkHandler:
    """aiosmtpd handler; ``faults(recipient, attempt)`` may script a failure."""

    inbox: Path | None = None
    faults: Callable[[str, int], Fault | None] | None = None
    refuse_greeting: Callable[[int], bool] | None = None  # connection number -> answer 421
    received: list[Received] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    connections: itertools.count[int] = field(default_factory=itertools.count)
    refused_greetings: int = 0
    keep_index: bool = False  # rewrite inbox/index.html after each message (``digestbot sink``)
    first_number: int = 0  # files are numbered after this one (``digestbot sink`` keeps old ones)
    on_received: Callable[[Received, Path | None], None] | None = None
    bodies: list[Body] = field(default_factory=list)
    index: InboxIndex | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.keep_index and self.inbox is not None:
            self.index = InboxIndex(self.inbox)  # the messages already there, read once

    @classmethod
    def with_rates(cls, rates: FaultRates, inbox: Path | None = None) -> SinkHandler:
        return cls(inbox=inbox, faults=rates, refuse_greeting=rates.refuse_greeting)

    async def handle_RCPT(
        self, server: SMTPServer, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:  # noqa: N802 - aiosmtpd calls handle_<VERB> by name
        with self.lock:
            self.attempts[address] = self.attempts.get(address, 0) + 1
        reply = await self._fault_for(address, "rcpt", server)
        if reply:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def _fault_for(self, recipient: str, where: str, server: SMTPServer, body: bytes = b"") -> str | None:
        """The scripted reply for this recipient's current attempt (0-based) at *where*
        (at "data", *body* is the message, whose fate goes in ``bodies``)."""
        if self.faults is None:
            return None
        fault = self.faults(recipient, self.attempts.get(recipient, 1) - 1)
        if fault is None or fault.at != where:
            return None
        queued = where == "data" and (fault.reply or "").startswith("2")
        if fault.stall:
            if not await self._stalled(recipient, fault.stall, server, body if queued else None):
                return "421 4.4.2 nobody listening any more"
            if queued:
                return None  # a slow acceptance is still an acceptance: recorded like any other
        if fault.drop:
            if where == "data":
                self._arrived(recipient, body, "dropped")
            if server.transport is not None:
                server.transport.close()
            return "421 4.4.2 closing connection"
        if where == "data" and fault.reply:
            self._arrived(recipient, body, fault.reply)
        return fault.reply

    async def _stalled(self, recipient: str, seconds: float, server: SMTPServer, queued: bytes | None) -> bool:
        """Wait *seconds* before answering; whether the client still listens.  A *queued*
        message whose client hung up meanwhile arrived "late": a relay passes it on."""
        listening = False
        try:
            listening = await _still_listening_after(server, seconds)
        finally:  # also when aiosmtpd cancels the session of a client that hung up
            if queued is not None and not listening:
                self._arrived(recipient, queued, "late")
        return listening

    def _arrived(self, recipient: str, data: bytes, fate: str) -> None:
        parsed = email.message_from_bytes(data[:65536], policy=default_policy)
        with self.lock:
            self.bodies.append(Body(recipient, str(parsed.get("Message-ID", "")), fate))

    async def handle_DATA(self, server: SMTPServer, session: Any, envelope: Any) -> str:  # noqa: N802 - as above
        recipient = envelope.rcpt_tos[0] if envelope.rcpt_tos else ""
        body = envelope.original_content or envelope.content
        body = body.encode("utf-8") if isinstance(body, str) else body or b""
        reply = await self._fault_for(recipient, "data", server, body)
        if reply:
            return reply
        self._arrived(recipient, body, "accepted")
        data = envelope.original_content or envelope.content
        if isinstance(data, str):
            data = data.encode("utf-8")
        received = Received(envelope.mail_from, list(envelope.rcpt_tos), data, session.host_name or "")
        with self.lock:
            self.received.append(received)
            number = self.first_number + len(self.received)
        saved = None
        if self.inbox is not None:
            self.inbox.mkdir(parents=True, exist_ok=True)
            saved = self.inbox / f"{number:04d}.eml"
            write_whole(saved, data)
            if self.index is not None:
                with self.lock:
                    self.index.add(saved, data)
        if self.on_received is not None:
            self.on_received(received, saved)
        return "250 2.0.0 OK: queued"


class _GreetingServer(SMTPServer):
    """aiosmtpd's SMTP session, able to refuse a connection with 421 instead of its
    220 greeting.  aiosmtpd has no hook before the greeting, so this overrides the
    (private) coroutine that sends it; tests pin the behaviour."""

    async def _handle_client(self) -> None:
        handler: SinkHandler = self.event_handler
        refuse = handler.refuse_greeting
        if refuse is not None and refuse(next(handler.connections)):
            with handler.lock:
                handler.refused_greetings += 1
            await self.push("421 4.3.2 service not available, closing connection")
            if self.transport is not None:
                self.transport.close()
            return
        await super()._handle_client()


class _Logins:
    """aiosmtpd authenticator over a fixed user -> password table."""

    def __init__(self, logins: dict[str, str]) -> None:
        self.logins = logins

    def __call__(self, server: SMTPServer, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
        login = getattr(auth_data, "login", b"") or b""
        password = getattr(auth_data, "password", b"") or b""
        user = login.decode("utf-8", "replace") if isinstance(login, bytes) else str(login)
        secret = password.decode("utf-8", "replace") if isinstance(password, bytes) else str(password)
        # handled=False: aiosmtpd then answers 535 itself (True means "already answered").
        return AuthResult(success=user in self.logins and self.logins[user] == secret, handled=False)


class _Controller(Controller):
    def factory(self) -> SMTPServer:
        return _GreetingServer(self.handler, **self.SMTP_kwargs)


class Sink:
    """Start/stop an aiosmtpd server in its own thread on 127.0.0.1."""

    def __init__(
        self,
        handler: SinkHandler,
        port: int | None = None,
        *,
        logins: dict[str, str] | None = None,
        authenticator: Any = None,
        host: str = "127.0.0.1",
        tls_context: Any = None,
    ) -> None:
        """*logins*: require SMTP AUTH (PLAIN/LOGIN, no TLS on loopback) with these user -> password
        pairs; *authenticator*: an aiosmtpd authenticator to use instead (a server that misbehaves);
        *tls_context*: offer STARTTLS with this server-side ``ssl.SSLContext``."""
        self.handler = handler
        self.port = port or free_port()
        auth: dict[str, Any] = {}
        if logins is not None:
            # Plain AUTH without TLS is fine on loopback; aiosmtpd warns about it, so say so once here.
            auth = {"authenticator": authenticator or _Logins(logins), "auth_required": True, "auth_require_tls": False}
        self.controller = _Controller(
            handler,
            hostname=host,
            port=self.port,
            ready_timeout=10,
            decode_data=False,
            data_size_limit=50_000_000,
            **auth,
            **({"tls_context": tls_context, "require_starttls": False} if tls_context is not None else {}),
        )

    def __enter__(self) -> Sink:
        # The controller's own readiness probe connects once; it must get its 220.
        refuse, self.handler.refuse_greeting = self.handler.refuse_greeting, None
        try:
            self.controller.start()
        finally:
            self.handler.refuse_greeting = refuse
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()

    @property
    def received(self) -> list[Received]:
        return self.handler.received
