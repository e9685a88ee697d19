"""Signed, per-subscriber tokens for unsubscribe and manage links, and for the
expiring link that confirms a sign-up.

``<subscriber id>.<HMAC-SHA256(key, id + the subscriber's secret)>``: bound to
one subscriber, revocable by rotating that subscriber's secret, unforgeable
without the key.  Made for links in digests, checked by the subscriber
endpoint (``bot.web``).  The key never leaves this module's callers and is
never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

from bot.config import ConfigError, Settings, read_secret_file


def signing_key(settings: Settings) -> bytes:
    """From ``DIGESTBOT_WEB__SIGNING_KEY``, else ``web.signing_key_file``, else a
    random key created once (mode 0600) in ``<var_dir>/signing.key``."""
    if settings.web.signing_key.get_secret_value():
        return settings.web.signing_key.get_secret_value().encode("utf-8")
    path = Path(settings.web.signing_key_file or settings.paths.var_dir / "signing.key")
    try:
        if settings.web.signing_key_file is None and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(32))
    except FileExistsError:  # another process created it first
        pass
    except OSError as exc:
        raise ConfigError(f"web.signing_key_file: cannot create {path}: {exc.strerror}") from None
    key = read_secret_file(path, "web.signing_key_file")
    if len(key) < 16:
        raise ConfigError(f"web.signing_key_file: {path} holds fewer than 16 characters")
    return key.encode("utf-8")


def _signature(key: bytes, subscriber_id: int, secret: str) -> str:
    mac = hmac.new(key, f"subscriber:{subscriber_id}:{secret}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac[:18]).decode("ascii")


def make_token(key: bytes, subscriber_id: int, secret: str) -> str:
    return f"{subscriber_id}.{_signature(key, subscriber_id, secret)}"


def token_subscriber_id(token: str) -> int | None:
    """The subscriber id a well-formed token names (not yet verified)."""
    ident, dot, signature = token.partition(".")
    if not dot or not ident.isascii() or not ident.isdigit() or len(ident) > 18 or len(signature) != 24:
        return None
    return int(ident)


def token_is_valid(key: bytes, token: str, subscriber_id: int, secret: str) -> bool:
    """Constant-time check that *token* is the one made for this subscriber and secret."""
    return hmac.compare_digest(token.encode("utf-8", "replace"), make_token(key, subscriber_id, secret).encode("ascii"))


def _confirm_signature(key: bytes, subscriber_id: int, expires: int, secret: str) -> str:
    mac = hmac.new(key, f"confirm:{subscriber_id}:{expires}:{secret}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac[:18]).decode("ascii")


def make_confirm_token(key: bytes, subscriber_id: int, secret: str, expires: datetime) -> str:
    """``<subscriber id>.<expiry, Unix seconds>.<HMAC>``: the link in a sign-up's
    confirmation mail, bound to one subscriber and useless after *expires*."""
    stamp = int(expires.timestamp())
    return f"{subscriber_id}.{stamp}.{_confirm_signature(key, subscriber_id, stamp, secret)}"


def confirm_token_parts(token: str) -> tuple[int, datetime] | None:
    """The subscriber id and expiry a well-formed confirmation token names (not yet verified)."""
    ident, stamp, signature = (token.split(".") + ["", ""])[:3]
    if token.count(".") != 2 or len(signature) != 24:
        return None
    if not (ident.isascii() and ident.isdigit() and stamp.isascii() and stamp.isdigit()):
        return None
    if len(ident) > 18 or len(stamp) > 11:  # 11 digits stay within datetime's years
        return None
    return int(ident), datetime.fromtimestamp(int(stamp), UTC)


def confirm_token_is_valid(key: bytes, token: str, subscriber_id: int, secret: str, expires: datetime) -> bool:
    expected = make_confirm_token(key, subscriber_id, secret, expires)
    return hmac.compare_digest(token.encode("utf-8", "replace"), expected.encode("ascii"))
