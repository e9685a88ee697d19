"""Deliver stage: bytes to an SMTP server with aiosmtplib, and what came back.

A small pool of reused connections and an optional rate limit.  Each step before the
message's final dot (connect, MAIL, RCPT, DATA) has ``smtp.timeout_seconds``; the reply
to the final dot is waited for ``smtp.final_reply_seconds`` (RFC 5321 4.5.3.2.6 gives it
ten minutes, because a client that gives up sooner makes the server deliver twice: RFC
1047), or until a stop's deadline.  Outcomes are classified, not acted on: ``sent`` only
on the 250 after DATA; a reply of 4xx, and failures before the final dot, are
``temporary``; a 5xx for the recipient or the message is ``permanent``; a connection
lost or a wait run out after the final dot is ``unknown`` (the server may have it).
``policy`` decides what to do with them; one message's way through a connection is
``transmit``'s.  Never renders, never touches the store; never logs the password.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

import aiosmtplib
from pydantic import SecretStr

from bot.config import Settings, SmtpConfig
from bot.delivery.transmit import Wire, transmit
from bot.mail.message import SmtpData


class Outcome(StrEnum):
    SENT = "sent"
    TEMPORARY = "temporary"
    PERMANENT = "permanent"
    UNKNOWN = "unknown"  # the whole message went out and no reply was seen


@dataclass(frozen=True, slots=True)
class SendResult:
    outcome: Outcome
    code: int | None
    detail: str  # one line, safe to store and show


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:500]


class LoginRefused(aiosmtplib.SMTPException):
    """The server refused our login.  Its reply is dropped: a server may quote the
    AUTH argument back (``535 ... AGJvdABwYXNzd29yZA==``), which is the password."""

    def __init__(self, code: int | None) -> None:
        super().__init__(f"SMTP login refused ({code or 'no code'}); the server's reply is not kept")
        self.code = code


def classify(exc: BaseException, *, after_dot: bool = False) -> SendResult:
    """Turn an aiosmtplib/network exception into an outcome; *after_dot*: raised once the
    message's final dot was written, where only a reply tells what the server did."""
    if after_dot and not isinstance(exc, (aiosmtplib.SMTPResponseException, aiosmtplib.SMTPRecipientsRefused)):
        return SendResult(Outcome.UNKNOWN, None, f"no reply to the final dot: {_what_ended(exc)}")
    if isinstance(exc, LoginRefused):
        return SendResult(Outcome.TEMPORARY, exc.code, str(exc))
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        first = exc.recipients[0] if exc.recipients else None
        code = getattr(first, "code", None)
        detail = f"recipient refused: {code} {_one_line(getattr(first, 'message', ''))}"
        return SendResult(Outcome.PERMANENT if code and code >= 500 else Outcome.TEMPORARY, code, detail)
    if isinstance(
        exc,
        (
            aiosmtplib.SMTPAuthenticationError,
            aiosmtplib.SMTPSenderRefused,
            aiosmtplib.SMTPHeloError,
            aiosmtplib.SMTPConnectResponseError,
        ),
    ):
        # The server's or our configuration's problem, not the recipient's: retry, never bounce.
        return SendResult(Outcome.TEMPORARY, getattr(exc, "code", None), f"{type(exc).__name__}: {_one_line(exc)}")
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        code = exc.code
        outcome = Outcome.PERMANENT if 500 <= code < 600 else Outcome.TEMPORARY
        return SendResult(outcome, code, f"{code} {_one_line(exc.message)}")
    if isinstance(exc, (asyncio.TimeoutError, aiosmtplib.SMTPTimeoutError)):
        return SendResult(Outcome.TEMPORARY, None, "timed out")
    if isinstance(exc, (aiosmtplib.SMTPException, OSError, ConnectionError)):
        return SendResult(Outcome.TEMPORARY, None, f"{type(exc).__name__}: {_one_line(exc)}")
    raise exc


def _what_ended(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, aiosmtplib.SMTPTimeoutError)):
        return "the wait ran out"
    if isinstance(exc, StoppedWaiting):
        return str(exc)
    return f"{type(exc).__name__}: {_one_line(exc)}"


class StoppedWaiting(Exception):
    """The reply to a final dot was no longer waited for: the daemon is stopping."""


class RateLimiter:
    """At most *rate* acquisitions per second across all tasks (0: unlimited); a
    ``stop`` ends every wait at once (the sends waiting then go nowhere)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.next_at = 0.0
        self.lock = asyncio.Lock()
        self.stopped = asyncio.Event()

    async def wait(self) -> None:
        if not self.interval:
            return
        async with self.lock:
            now = time.monotonic()
            if self.next_at > now and not self.stopped.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopped.wait(), self.next_at - now)
            self.next_at = max(now, self.next_at) + self.interval

    def stop(self) -> None:
        self.stopped.set()


def helo_name(configured: str, from_address: str, fqdn: Callable[[], str] = socket.getfqdn) -> str:
    """The name EHLO gives: ``smtp.helo_name``, else the From address's domain, else
    this machine's fully qualified name, whichever first is a public-looking host
    name (dotted, not localhost); else the loopback address literal.  Receivers
    score or refuse a greeting of "localhost" or of a name without a dot."""
    if configured:
        return configured

    def from_domain() -> str:
        return from_address.rpartition("@")[2]

    for ask in (from_domain, fqdn):  # this machine's name is looked up only when needed
        found = ask()
        try:  # an internationalized domain greets in its ASCII form
            name = found.strip().rstrip(".").encode("idna").decode("ascii").lower()
        except UnicodeError:
            continue
        if "." in name and _HELO.fullmatch(name) and not name.endswith(("localhost", ".localdomain", ".local")):
            return name
    return "[127.0.0.1]"


_HELO = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+")


def tls_client(config: SmtpConfig, helo: str | None = None) -> aiosmtplib.SMTP:
    """An unconnected client with the configured host, port, timeout and TLS, greeting
    with *helo* (``helo_name``; None: aiosmtplib's own choice, for tests)."""
    tls_context = None
    if config.tls != "none":
        tls_context = ssl.create_default_context()
        if not config.verify_certificates:
            tls_context.check_hostname = False
            tls_context.verify_mode = ssl.CERT_NONE
    return aiosmtplib.SMTP(
        hostname=config.host,
        port=config.port,
        timeout=config.timeout_seconds,
        use_tls=config.tls == "tls",
        start_tls=True if config.tls == "starttls" else False,
        validate_certs=config.verify_certificates,
        tls_context=tls_context,
        local_hostname=helo,
    )


def redacted_text(text: str, user: str, password: SecretStr) -> str:
    """*text* without the password in any form AUTH sends it (plain, base64, PLAIN's triple)."""
    secret = password.get_secret_value()
    if not secret:
        return text
    for form in (
        secret,
        base64.b64encode(secret.encode()).decode(),
        base64.b64encode(f"\0{user}\0{secret}".encode()).decode(),
    ):
        text = text.replace(form, "***")
    return text


class SmtpPool:
    """Up to ``pool_size`` open connections, each used by one send at a time."""

    def __init__(
        self,
        config: SmtpConfig,
        password: SecretStr,
        *,
        helo: str | None = None,
        sender_address: str | None = None,
        final_reply_seconds: float | None = None,
    ) -> None:
        """*helo*: the name to greet with; else, with *sender_address*, ``helo_name``'s
        choice (made on first connect, in a thread: it may ask DNS for this machine's
        name, and the web server's loop sends sign-up mail); else aiosmtplib's.
        *final_reply_seconds*: how long the reply to a final dot is waited for
        (``smtp.final_reply_seconds`` unless given)."""
        self.config = config
        self._password = password
        self._helo = helo
        self._sender_address = sender_address
        self._idle: asyncio.LifoQueue[aiosmtplib.SMTP] = asyncio.LifoQueue()
        self._slots = asyncio.Semaphore(config.pool_size)
        self._open: set[aiosmtplib.SMTP] = set()
        self._limiter = RateLimiter(config.rate_per_second)
        self.final_reply_seconds = final_reply_seconds or config.final_reply_seconds
        self._stopping = False
        self._replying: set[aiosmtplib.SMTP] = set()  # connections waiting for the reply to a final dot
        self.gave_up = False  # a stop's deadline came: those waiting were closed

    @classmethod
    def of(cls, settings: Settings, *, final_reply_seconds: float | None = None) -> SmtpPool:
        """The pool delivery uses: the configured server, password and greeting."""
        return cls(
            settings.smtp,
            settings.smtp.resolved_password(),
            sender_address=settings.sender.from_address,
            final_reply_seconds=final_reply_seconds,
        )

    def stop(self, deadline_seconds: float) -> None:
        """Put nothing more on the wire (a send waiting for a connection returns None at
        once), and wait for no reply to a final dot longer than *deadline_seconds* from
        now: those still unanswered then are unknown."""
        self._stopping = True
        self._limiter.stop()
        asyncio.get_running_loop().call_later(max(0.0, deadline_seconds), self._give_up)

    def _give_up(self) -> None:
        self.gave_up = True
        for client in list(self._replying):
            client.close()

    async def _client(self) -> aiosmtplib.SMTP:
        if self._helo is None and self._sender_address is not None:
            self._helo = await asyncio.to_thread(helo_name, self.config.helo_name, self._sender_address)
        return tls_client(self.config, self._helo)

    async def _connected(self) -> aiosmtplib.SMTP:
        while not self._idle.empty():
            client = self._idle.get_nowait()
            if client.is_connected:
                return client
            self._open.discard(client)
        client = await self._client()
        await client.connect()
        if self.config.username:
            try:
                await client.login(self.config.username, self._password.get_secret_value())
            except aiosmtplib.SMTPResponseException as exc:
                client.close()
                raise LoginRefused(exc.code) from None
        self._open.add(client)
        return client

    async def _discard(self, client: aiosmtplib.SMTP | None) -> None:
        if client is None:
            return
        self._open.discard(client)
        try:
            client.close()
        except Exception:  # closing a broken connection must not mask the real error
            pass

    async def send(
        self,
        sender: str,
        recipient: str,
        data: bytes | SmtpData,
        *,
        wanted: Callable[[], Awaitable[bool]] | None = None,
    ) -> SendResult | None:
        """One message, one recipient: each step before the final dot within
        ``timeout_seconds`` (a connection taken from the pool or made, MAIL, RCPT, DATA),
        the reply to the final dot within ``final_reply_seconds``.  None, nothing sent,
        when *wanted* (asked once the recipient is accepted, just before DATA: the last
        moment the message can still be held back) says it may not go on the wire."""
        if self._stopping:
            return None  # nothing more goes on the wire
        await self._limiter.wait()
        async with self._slots:
            if self._stopping:
                return None  # nothing more goes on the wire
            client: aiosmtplib.SMTP | None = None
            wire = Wire(self.final_reply_seconds, self._replying)
            try:
                async with asyncio.timeout(self.config.timeout_seconds) as steps:
                    wire.steps = steps
                    client = wire.client = await self._connected()

                    # The gate (a store's write, rarely waited for) counts in the steps' time;
                    # the reply to the final dot has its own, longer wait (``Wire.reply``).
                    response = await transmit(client, sender, recipient, data, wire=wire, gate=wanted)
            except BaseException as exc:
                await self._discard(client)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                if wire.after_dot and self.gave_up and not isinstance(exc, aiosmtplib.SMTPResponseException):
                    exc = StoppedWaiting("the stop's deadline came first")
                return self._redacted(classify(exc, after_dot=wire.after_dot))
            self._idle.put_nowait(client)
            if response is None:
                return None
            return self._redacted(SendResult(Outcome.SENT, 250, _one_line(response)))

    def _redacted(self, result: SendResult) -> SendResult:
        """*result* without the password in any form AUTH sends it, whatever a reply quoted."""
        detail = redacted_text(result.detail, self.config.username, self._password)
        return result if detail == result.detail else SendResult(result.outcome, result.code, detail)

    async def close(self) -> None:
        while not self._idle.empty():
            client = self._idle.get_nowait()
            try:
                await asyncio.wait_for(client.quit(), timeout=2)
            except Exception:
                client.close()
            self._open.discard(client)
        for client in list(self._open):
            await self._discard(client)

    async def __aenter__(self) -> SmtpPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
