"""Deliver stage: bytes to an SMTP server with aiosmtplib, and what came back.

A small pool of reused connections, an optional rate limit, one overall
timeout per message.  Outcomes are classified, not acted on: ``sent`` only on
the 250 after DATA; 4xx, disconnects and timeouts are ``temporary``; a 5xx
for the recipient or the message is ``permanent``.  ``policy`` decides what
to do with them.  Never renders, never touches the store; never logs the
password.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

import aiosmtplib
from aiosmtplib.protocol import SMTPProtocol
from pydantic import SecretStr

from bot.config import Settings, SmtpConfig
from bot.mail.message import Prepared, prepared


class Outcome(StrEnum):
    SENT = "sent"
    TEMPORARY = "temporary"
    PERMANENT = "permanent"


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


def classify(exc: BaseException) -> SendResult:
    """Turn an aiosmtplib/network exception into an outcome."""
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


class RateLimiter:
    """At most *rate* acquisitions per second across all tasks (0: unlimited)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.next_at = 0.0
        self.lock = asyncio.Lock()

    async def wait(self) -> None:
        if not self.interval:
            return
        async with self.lock:
            now = time.monotonic()
            if self.next_at > now:
                await asyncio.sleep(self.next_at - now)
            self.next_at = max(now, self.next_at) + self.interval


# An addr-spec of dot-atom text only (RFC 5321 4.1.2): nothing to parse or quote.
_PLAIN_ADDRESS = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
)


def _can_send_prepared(protocol: object) -> bool:
    return all(hasattr(protocol, name) for name in ("_command_lock", "_response_pending", "write", "read_response"))


async def transmit(
    client: aiosmtplib.SMTP, sender: str, recipient: str, message: bytes | Prepared
) -> aiosmtplib.SMTPResponse:
    """MAIL, RCPT and DATA for one recipient, as ``SMTP.sendmail`` does them.

    ``sendmail`` runs three regular-expression passes over the whole message
    (line-end normalization for SIZE and again for DATA, then dot-stuffing),
    which cost more than building a spliced message.  Our messages
    have CRLF line ends already, so here DATA gets the message dot-stuffed
    with one ``bytes.replace``, written under aiosmtplib's own command lock
    exactly as its ``execute_data_command`` writes it (a spliced message comes
    ``Prepared`` already).  Anything else (other line ends, an aiosmtplib whose
    protocol looks different) goes through ``sendmail``; tests/test_deliver.py
    checks the fast way is the one taken."""
    ready = message if isinstance(message, Prepared) else prepared(message)
    protocol = client.protocol
    if ready is None or protocol is None or not (sender + recipient).isascii() or not _can_send_prepared(protocol):
        data = message if isinstance(message, bytes) else _unstuffed(message)
        _refused, reply = await client.sendmail(sender, [recipient], data)
        return aiosmtplib.SMTPResponse(aiosmtplib.SMTPStatus.completed, reply)
    options = [f"size={ready.size}"] if client.supports_extension("size") else []
    await _envelope(client, sender, recipient, options)
    return await _data(client, protocol, ready)


async def _envelope(client: aiosmtplib.SMTP, sender: str, recipient: str, options: list[str]) -> None:
    """MAIL FROM and RCPT TO, raising what ``sendmail`` raises when either is refused."""
    if client.is_ehlo_or_helo_needed or not (_PLAIN_ADDRESS.fullmatch(sender) and _PLAIN_ADDRESS.fullmatch(recipient)):
        await client.mail(sender, options=options)
        try:
            await client.rcpt(recipient)
        except aiosmtplib.SMTPRecipientRefused as exc:
            raise aiosmtplib.SMTPRecipientsRefused([exc]) from None  # as sendmail reports it
        return
    # What mail() and rcpt() send for a plain address, without their address
    # parsing (email.utils.parseaddr twice a message); a test checks
    # aiosmtplib quotes every such address the same way.
    response = await client.execute_command(
        b"MAIL", b"FROM:<%s>" % sender.encode("ascii"), *(option.encode("ascii") for option in options)
    )
    if response.code != aiosmtplib.SMTPStatus.completed:
        raise aiosmtplib.SMTPSenderRefused(response.code, response.message, sender)
    response = await client.execute_command(b"RCPT", b"TO:<%s>" % recipient.encode("ascii"))
    if response.code not in (aiosmtplib.SMTPStatus.completed, aiosmtplib.SMTPStatus.will_forward):
        error = aiosmtplib.SMTPRecipientRefused(response.code, response.message, recipient)
        raise aiosmtplib.SMTPRecipientsRefused([error])


async def _data(client: aiosmtplib.SMTP, protocol: SMTPProtocol, ready: Prepared) -> aiosmtplib.SMTPResponse:
    """DATA with the message written as it is (dot-stuffed, ending in CRLF.CRLF)."""
    timeout = client.timeout
    # aiosmtplib's own command lock and response flag, used as its execute_data_command uses them.
    lock = protocol._command_lock  # noqa: SLF001 - see the comment above
    if lock is None:
        raise aiosmtplib.SMTPServerDisconnected("Server not connected")
    async with lock:
        protocol._response_pending = True  # noqa: SLF001 - see the comment above
        protocol.write(b"DATA\r\n")
        start = await protocol.read_response(timeout=timeout)
        if start.code != aiosmtplib.SMTPStatus.start_input:
            raise aiosmtplib.SMTPDataError(start.code, start.message)
        protocol._response_pending = True  # noqa: SLF001 - see the comment above
        protocol.write(ready.wire)
        response = await protocol.read_response(timeout=timeout)
    if response.code != aiosmtplib.SMTPStatus.completed:
        raise aiosmtplib.SMTPDataError(response.code, response.message)
    return response


def _unstuffed(message: Prepared) -> bytes:
    body = message.wire[: -len(b".\r\n")]
    body = body[1:] if body.startswith(b".") else body
    return body.replace(b"\r\n..", b"\r\n.")


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
        self, config: SmtpConfig, password: SecretStr, *, helo: str | None = None, sender_address: str | None = None
    ) -> None:
        """*helo*: the name to greet with; else, with *sender_address*, ``helo_name``'s
        choice (made on first connect, in a thread: it may ask DNS for this machine's
        name, and the web server's loop sends sign-up mail); else aiosmtplib's."""
        self.config = config
        self._password = password
        self._helo = helo
        self._sender_address = sender_address
        self._idle: asyncio.LifoQueue[aiosmtplib.SMTP] = asyncio.LifoQueue()
        self._slots = asyncio.Semaphore(config.pool_size)
        self._open: set[aiosmtplib.SMTP] = set()
        self._limiter = RateLimiter(config.rate_per_second)

    @classmethod
    def of(cls, settings: Settings) -> SmtpPool:
        """The pool delivery uses: the configured server, password and greeting."""
        return cls(settings.smtp, settings.smtp.resolved_password(), sender_address=settings.sender.from_address)

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
        data: bytes | Prepared,
        *,
        wanted: Callable[[], Awaitable[bool]] | None = None,
    ) -> SendResult | None:
        """One message, one recipient, within ``timeout_seconds`` from connect to the 250
        after DATA; None, nothing sent, when *wanted* (asked once a connection is free,
        just before the message goes on the wire) says it no longer is."""
        await self._limiter.wait()
        async with self._slots:
            if wanted is not None and not await wanted():
                return None
            client: aiosmtplib.SMTP | None = None
            try:
                async with asyncio.timeout(self.config.timeout_seconds):
                    client = await self._connected()
                    response = await transmit(client, sender, recipient, data)
            except BaseException as exc:
                await self._discard(client)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return self._redacted(classify(exc))
            self._idle.put_nowait(client)
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
