"""Secrets a reader gives digestbot (a Zotero API key; a chat webhook later), sealed
before they are stored.

The store holds them only sealed (Fernet: AES-128 in CBC mode with an HMAC, from the
``cryptography`` package) with the site's secrets key, a random key made once in a
file of its own beside the signing key (``secrets.key``, mode 0600).  A backup of the
store therefore holds them only sealed, and ``db backup`` never copies the secrets key:
a store restored on a machine without it keeps its readers' connections, but each one
is "broken: connect again" until its reader does.  Never logs, never prints, never
returns a sealed value in clear but to the one caller that sends it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bot.config import ConfigError, Settings
from bot.tokens import key_file

SECRETS_FILE = "secrets.key"


def secrets_key_file(settings: Settings) -> Path:
    """Where the secrets key is kept: beside the signing key's file (in ``var_dir``
    when the signing key comes from the environment)."""
    signing = key_file(settings)
    return (signing.parent if signing is not None else settings.paths.var_dir) / SECRETS_FILE


@dataclass(frozen=True, slots=True)
class Sealer:
    """Seals and opens with one key (``sealer_of`` reads it)."""

    key: bytes  # Fernet's: 32 bytes, url-safe base64

    def seal(self, secret: str) -> str:
        from cryptography.fernet import Fernet

        return Fernet(self.key).encrypt(secret.encode("utf-8")).decode("ascii")

    def open(self, sealed: str) -> str | None:
        """The secret *sealed* holds; None when another key sealed it or it is not one
        (a store restored without its secrets key, a row edited by hand)."""
        from cryptography.fernet import Fernet, InvalidToken

        try:
            return Fernet(self.key).decrypt(sealed.encode("ascii")).decode("utf-8")
        except (InvalidToken, ValueError, UnicodeError):
            return None


def sealer_of(settings: Settings) -> Sealer:
    """The site's sealer, its key read from ``secrets_key_file`` (made there, mode 0600,
    the first time one is needed); ``ConfigError`` naming the file when it cannot be."""
    from cryptography.fernet import Fernet

    path = secrets_key_file(settings)
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(Fernet.generate_key())
    except FileExistsError:  # another process made it first
        pass
    except OSError as exc:
        raise ConfigError(f"{path}: cannot create the secrets key: {exc.strerror}") from None
    try:
        key = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the secrets key: {exc.strerror}") from None
    try:
        Fernet(key)
    except ValueError:
        raise ConfigError(f"{path}: not a secrets key (32 url-safe base64 bytes, as digestbot makes one)") from None
    return Sealer(key)
