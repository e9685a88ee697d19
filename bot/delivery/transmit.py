"""Delivery stage: one message through one SMTP connection, as ``SMTP.sendmail`` would
send it but faster: MAIL and RCPT, the gate a message passes just before DATA (the last
moment it can be held back), DATA with the message as it is, and the reply to the final
dot waited for apart from the steps before it (``Wire``).  Never opens a connection
(``smtp.SmtpPool`` does), never classifies what comes back, never touches the store.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

import aiosmtplib
from aiosmtplib.protocol import SMTPProtocol

from bot.mail.message import SmtpData, prepared

# An addr-spec of dot-atom text only (RFC 5321 4.1.2): nothing to parse or quote.
_PLAIN_ADDRESS = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
)


def _can_send_prepared(protocol: object) -> bool:
    return all(hasattr(protocol, name) for name in ("_command_lock", "_response_pending", "write", "read_response"))


class Wire:
    """One message's way through a connection: whether its final dot was written, and
    the reply to it waited for *reply_seconds*, not within *steps* (the time the steps
    before it had).  While it waits, its connection is among *replying*: a stop's
    deadline closes those (``SmtpPool.stop``), which ends the wait at once."""

    def __init__(
        self,
        reply_seconds: float,
        replying: set[aiosmtplib.SMTP] | None = None,
        steps: asyncio.Timeout | None = None,
    ) -> None:
        self.reply_seconds = reply_seconds
        self.replying = replying
        self.steps = steps
        self.client: aiosmtplib.SMTP | None = None
        self.after_dot = False

    async def reply(self, read: Awaitable[aiosmtplib.SMTPResponse]) -> aiosmtplib.SMTPResponse:
        if self.steps is not None:
            self.steps.reschedule(None)
        if self.replying is None or self.client is None:
            return await read
        self.replying.add(self.client)
        try:
            return await read
        finally:
            self.replying.discard(self.client)


Gate = Callable[[], Awaitable[bool]]


async def transmit(
    client: aiosmtplib.SMTP,
    sender: str,
    recipient: str,
    message: bytes | SmtpData,
    *,
    wire: Wire | None = None,
    gate: Gate | None = None,
) -> aiosmtplib.SMTPResponse | None:
    """MAIL, RCPT and DATA for one recipient, as ``SMTP.sendmail`` does them; None, the
    envelope reset and nothing sent, when *gate* (asked once the recipient is accepted,
    just before DATA) says the message may not go on the wire.

    ``sendmail`` runs three regular-expression passes over the whole message
    (line-end normalization for SIZE and again for DATA, then dot-stuffing),
    which cost more than building a spliced message.  Our messages
    have CRLF line ends already, so here DATA gets the message dot-stuffed
    with one ``bytes.replace``, written under aiosmtplib's own command lock
    exactly as its ``execute_data_command`` writes it (a spliced message comes
    ``SmtpData`` already; any other is made so).  An aiosmtplib whose protocol
    looks different goes through ``sendmail``, where the final dot cannot be told
    apart: any failure without a reply there is unknown.  tests/test_deliver.py checks
    the fast way is the one taken."""
    wire = wire or Wire(client.timeout or 60.0)
    ready = message if isinstance(message, SmtpData) else prepared(_crlf(message))
    protocol = client.protocol
    if ready is None or protocol is None or not _can_send_prepared(protocol):
        if gate is not None and not await gate():
            return None
        data = message if isinstance(message, bytes) else _unstuffed(message)
        wire.after_dot = True  # sendmail's own DATA: where it failed cannot be told
        _refused, reply = await client.sendmail(sender, [recipient], data)
        return aiosmtplib.SMTPResponse(aiosmtplib.SMTPStatus.completed, reply)
    options = [f"size={ready.size}"] if client.supports_extension("size") else []
    await _envelope(client, sender, recipient, options)
    if gate is not None and not await gate():
        await _reset(client)
        return None
    return await _data(client, protocol, ready, wire)


def _crlf(message: bytes) -> bytes:
    """*message* with every line end CRLF, as ``sendmail`` would send it."""
    return message.replace(b"\r\n", b"\n").replace(b"\r", b"\n").replace(b"\n", b"\r\n")


async def _reset(client: aiosmtplib.SMTP) -> None:
    """RSET after an envelope that will not be followed by DATA; a connection that does
    not take it is closed (the pool then drops it)."""
    try:
        await client.rset()
    except (aiosmtplib.SMTPException, OSError):
        client.close()


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


async def _data(
    client: aiosmtplib.SMTP, protocol: SMTPProtocol, ready: SmtpData, wire: Wire
) -> aiosmtplib.SMTPResponse:
    """DATA with the message written as it is (dot-stuffed, ending in CRLF.CRLF); the
    reply to DATA within the client's timeout, the reply to the final dot within *wire*'s."""
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
        if protocol.transport is None or protocol.transport.is_closing():
            raise aiosmtplib.SMTPServerDisconnected("Connection lost before the message")
        protocol._response_pending = True  # noqa: SLF001 - see the comment above
        protocol.write(ready.wire)
        wire.after_dot = True
        response = await wire.reply(protocol.read_response(timeout=wire.reply_seconds))
    if response.code != aiosmtplib.SMTPStatus.completed:
        raise aiosmtplib.SMTPDataError(response.code, response.message)
    return response


def _unstuffed(message: SmtpData) -> bytes:
    body = message.wire[: -len(b".\r\n")]
    body = body[1:] if body.startswith(b".") else body
    return body.replace(b"\r\n..", b"\r\n.")
