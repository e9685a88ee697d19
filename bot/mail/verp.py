"""Message stage: the VERP return path (``sender.bounce_address``), as pure functions.

With ``sender.bounce_address = "bounces@example.org"`` each digest goes out
with the envelope sender (MAIL FROM)

    bounces+d<digest id>.<signature>@example.org

where the signature is the first 16 characters of the base32 HMAC-SHA256 of
``verp:<digest id>`` under the signing key, in lower case (some servers
lower-case local parts).  A bounce sent to that address names its digest, and
through it the subscriber, however the bounce itself is worded; a forged or
altered address names nothing.  The From header is not changed.  Never reads
the store.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

SIGNATURE_CHARS = 16


def _signature(key: bytes, digest_id: int) -> str:
    mac = hmac.new(key, f"verp:{digest_id}".encode(), hashlib.sha256).digest()
    return base64.b32encode(mac).decode("ascii")[:SIGNATURE_CHARS].lower()


def return_path(key: bytes, bounce_address: str, digest_id: int) -> str:
    """The envelope sender of digest *digest_id*."""
    local, _, domain = bounce_address.rpartition("@")
    return f"{local}+d{digest_id}.{_signature(key, digest_id)}@{domain}"


def digest_of(key: bytes, bounce_address: str, address: str) -> int | None:
    """The digest id a return path made by ``return_path`` names; None for any other
    address (another mailbox, a forged or altered signature)."""
    local, _, domain = bounce_address.rpartition("@")
    their_local, at, their_domain = address.strip().strip("<>").rpartition("@")
    if not at or their_domain.casefold() != domain.casefold():
        return None
    base, plus, token = their_local.partition("+")
    if not plus or base.casefold() != local.casefold() or token[:1] not in ("d", "D"):
        return None
    ident, dot, signature = token[1:].partition(".")
    if not dot or not ident.isascii() or not ident.isdigit() or len(ident) > 18:
        return None
    digest_id = int(ident)
    expected = _signature(key, digest_id)
    return digest_id if hmac.compare_digest(signature.lower().encode("utf-8", "replace"), expected.encode()) else None
