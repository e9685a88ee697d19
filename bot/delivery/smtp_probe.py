"""Delivery stage: ``digestbot smtp test``, the configured SMTP connection step by step.

Resolve, connect (with the configured TLS), greet (EHLO, with the name delivery
uses), what TLS and which certificate, which AUTH mechanisms the server offers, log
in, and optionally send one test message: each step is reported as it ends, and
the first that fails ends the probe.  Never touches the store; never reports the password in any form.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

import aiosmtplib
from pydantic import SecretStr

from bot.config import SmtpConfig
from bot.delivery.smtp import redacted_text, tls_client


@dataclass(frozen=True, slots=True)
class Step:
    name: str  # resolve | connect | ehlo | tls | auth | login | send
    ok: bool
    detail: str


async def probe(
    config: SmtpConfig,
    password: SecretStr,
    *,
    sender: str,
    helo: str | None = None,
    message: bytes | None = None,
    recipient: str | None = None,
    report: Callable[[Step], None],
) -> bool:
    """Run the steps, calling *report* after each; whether all went well."""

    def said(name: str, ok: bool, detail: str) -> bool:
        report(Step(name, ok, redacted_text(detail, config.username, password)))
        return ok

    try:
        found = await asyncio.get_running_loop().getaddrinfo(config.host, config.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        return said("resolve", False, f"{config.host}: {exc}")
    addresses = sorted({str(info[4][0]) for info in found})
    said("resolve", True, f"{config.host} is {', '.join(addresses)}")
    client = tls_client(config, helo)
    try:
        try:
            response = await client.connect()
        except (TimeoutError, aiosmtplib.SMTPException, OSError) as exc:
            tls = " (TLS handshake)" if config.tls != "none" else ""
            return said("connect", False, f"{config.host}:{config.port}{tls}: {_reason(exc)}")
        said("connect", True, f"{config.host}:{config.port}: {response.code} {response.message.splitlines()[0]}")
        if not said("ehlo", *await _ehlo(client)) or not said("tls", *_tls(client, config)):
            return False
        mechanisms = client.server_auth_methods
        said("auth", True, "offered: " + (" ".join(m.upper() for m in mechanisms) if mechanisms else "none"))
        if not await _login(client, config, password, said):
            return False
        if message is not None and recipient is not None:
            try:
                errors, reply = await client.sendmail(sender, [recipient], message)
            except aiosmtplib.SMTPException as exc:
                return said("send", False, f"to {recipient}: {_reason(exc)}")
            return said("send", not errors, f"to {recipient}: {reply}")
        return True
    finally:
        if client.is_connected:
            try:
                await asyncio.wait_for(client.quit(), timeout=2)
            except Exception:  # a server that hangs up first is no failure of the probe
                client.close()


async def _ehlo(client: aiosmtplib.SMTP) -> tuple[bool, str]:
    """The greeting, with the name delivery gives, and what the server offers
    (aiosmtplib says EHLO only when it must)."""
    try:
        await client.ehlo()
    except aiosmtplib.SMTPException as exc:
        return False, f"as {client.local_hostname}: {_reason(exc)}"
    offered = " ".join(name.upper() for name in client.esmtp_extensions) or "no extensions"
    return True, f"as {client.local_hostname}; the server offers {offered}"


def _tls(client: aiosmtplib.SMTP, config: SmtpConfig) -> tuple[bool, str]:
    ssl_object = client.transport.get_extra_info("ssl_object") if client.transport else None
    if not isinstance(ssl_object, ssl.SSLObject):
        offered = (
            " (the server offers STARTTLS: set smtp.tls = starttls)" if client.supports_extension("starttls") else ""
        )
        return True, f"not used: smtp.tls = none{offered}"
    version = ssl_object.version() or "TLS"
    if not config.verify_certificates:
        return True, f"{version}; certificate not checked (smtp.verify_certificates = false)"
    certificate = ssl_object.getpeercert() or {}
    subject, issuer = _names(certificate.get("subject")), _names(certificate.get("issuer"))
    return True, f"{version}; certificate {subject or '(no subject)'}, issued by {issuer or '?'}, verified"


def _names(field: object) -> str:
    """A certificate's subject or issuer as "commonName=mail.example.org, ..."."""
    if not isinstance(field, tuple):
        return ""
    pairs = [pair for part in field if isinstance(part, tuple) for pair in part]
    return ", ".join(f"{pair[0]}={pair[1]}" for pair in pairs if isinstance(pair, tuple) and len(pair) == 2)


async def _login(
    client: aiosmtplib.SMTP, config: SmtpConfig, password: SecretStr, said: Callable[[str, bool, str], bool]
) -> bool:
    if not config.username:
        return said("login", True, "not configured (smtp.username is empty)")
    try:
        await client.login(config.username, password.get_secret_value())
    except aiosmtplib.SMTPException as exc:
        return said("login", False, f"as {config.username}: {_reason(exc)}")
    return said("login", True, f"as {config.username}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return f"{exc.code} {' '.join(exc.message.split())}"
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return " ".join(str(exc).split()) or type(exc).__name__
