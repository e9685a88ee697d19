"""Configuration, single values: the checks settings of several sections share (an IP
network, a DNS name, the name to greet an SMTP server with).  Pure functions that
return the cleaned value or raise ``ValueError`` in words the operator reads; never
read a file or the environment."""

from __future__ import annotations

import ipaddress
import re

# A DNS host name (letters, digits, inner hyphens; dot-separated labels) or an address
# literal such as [192.0.2.1], as EHLO takes (RFC 5321 4.1.1.1).
_HOST_NAME = re.compile(
    r"\[[0-9A-Fa-f:.]+\]"
    r"|(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def address_or_network(value: str) -> str:
    """A trusted proxy: one address or a network."""
    try:
        ipaddress.ip_network(value.strip(), strict=False)
        return value.strip()
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or network (e.g. 127.0.0.1 or 10.0.0.0/8)") from None


def dns_name(value: str) -> str:
    """A DKIM domain or selector: it goes into the DKIM-Signature header and names a DNS record."""
    if value and not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?", value):
        raise ValueError("must be a DNS name: letters, digits, dots, hyphens and underscores")
    return value


def greeting_name(value: str) -> str:
    """``smtp.helo_name``: empty (chosen when sending), a host name or an address
    literal, never localhost (receivers score or refuse it)."""
    value = value.strip()
    if value and (not _HOST_NAME.fullmatch(value) or value.lower().rstrip(".").endswith("localhost")):
        raise ValueError(f"{value!r} is not a host name this machine can greet with (e.g. mail.example.org)")
    return value
