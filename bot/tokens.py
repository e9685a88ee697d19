"""Signed, per-subscriber tokens for unsubscribe and manage links, and for the
expiring link that confirms a sign-up.

``<subscriber id>.<HMAC-SHA256(key, id + the subscriber's secret)>``: bound to
one subscriber, revocable by rotating that subscriber's secret, unforgeable
without the key.  Made for links in digests, checked by the subscriber
endpoint (``bot.web``).  The key never leaves this module's callers and is
never logged.  The token functions are pure; ``store_signing_key`` reads (and, the
first time, writes) the one store fact that names the key the store's links were
signed with, so a new key is refused before it breaks every link already mailed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from bot.config import ConfigError, Settings, read_secret_file
from bot.files import write_whole
from bot.store.engine import transaction
from bot.store.facts import fact, set_fact

KEY_ID_FACT = "signing_key_id"
ENVIRONMENT_KEY = "DIGESTBOT_WEB__SIGNING_KEY"


class SigningKeyError(ConfigError):
    """The signing key is not the one the store's links were signed with (one line)."""


def key_file(settings: Settings) -> Path | None:
    """The file the signing key is read from; None when it comes from the environment."""
    if settings.web.signing_key.get_secret_value():
        return None
    return Path(settings.web.signing_key_file or settings.paths.var_dir / "signing.key")


def key_id(key: bytes) -> str:
    """A name for *key* that reveals nothing of it: the store keeps it (``store_facts``)."""
    return hmac.new(key, b"digestbot: the key that signs this store's links", hashlib.sha256).hexdigest()[:16]


_BREAKS = "every manage link, feed and List-Unsubscribe already mailed would answer 404"


def store_signing_key(settings: Settings, factory: sessionmaker[Session]) -> bytes:
    """The signing key, after checking it is the one the store's links were signed with
    (the store remembers it from the first process that signed with it).  A key file
    digestbot would make anew is not made while the store remembers another key."""
    path = key_file(settings)
    with factory() as session:
        recorded = fact(session, KEY_ID_FACT)
    if recorded is not None and path is not None and settings.web.signing_key_file is None and not path.exists():
        raise SigningKeyError(
            f"{path} is missing, and this store's links were signed with it: {_BREAKS} with a new key. "
            "Put it back ('db backup' writes it beside each backup as FILE.key), or run "
            "'digestbot db adopt-key' to sign with a new key from now on"
        )
    key = signing_key(settings)
    if recorded is None:
        with transaction(factory) as session:
            if fact(session, KEY_ID_FACT) is None:
                set_fact(session, KEY_ID_FACT, key_id(key))
                return key
            recorded = fact(session, KEY_ID_FACT)
    if recorded != key_id(key):
        raise SigningKeyError(
            f"the signing key ({path or ENVIRONMENT_KEY}) is not the one this store's links were signed with: "
            f"{_BREAKS}. Put that key back, or run 'digestbot db adopt-key' to sign with this one from now on"
        )
    return key


def adopt_key(settings: Settings, factory: sessionmaker[Session]) -> bool:
    """Sign the store's links with the configured key from now on (made when there is
    none); whether the store remembered another key."""
    key = signing_key(settings)
    with transaction(factory) as session:
        recorded = fact(session, KEY_ID_FACT)
        set_fact(session, KEY_ID_FACT, key_id(key))
    return recorded is not None and recorded != key_id(key)


def key_beside(backup: Path) -> Path:
    """Where ``db backup FILE`` keeps the signing key: ``FILE.key``."""
    return backup.with_name(backup.name + ".key")


def backup_key(settings: Settings, backup: Path) -> str:
    """The signing key written beside *backup* (mode 0600), for its restore: the links
    its readers were mailed answer only to it.  What to tell the operator."""
    path = key_file(settings)
    if path is None:
        return f"the signing key comes from {ENVIRONMENT_KEY}: keep it with this backup (its links need it)"
    if not path.is_file():
        return "no signing key yet: no link was signed"
    _write_secret(key_beside(backup), path.read_bytes())
    return f"signing key copied to {key_beside(backup)}: keep it with the backup, as secret as the key itself"


def restore_key(settings: Settings, backup: Path, recorded: str | None, stamp: str) -> str | None:
    """The key beside *backup* put in the key file's place when the restored store's
    links were signed with it (*recorded*) and the configured key is another; the
    configured one is moved aside.  What to tell the operator, None when nothing is to say."""
    path = key_file(settings)
    current = signing_key(settings) if path is None or path.is_file() else None
    if recorded is None or (current is not None and key_id(current) == recorded):
        return None
    beside = key_beside(backup)
    saved = read_secret_file(beside, "the backup's key").encode("utf-8") if beside.is_file() else b""
    if key_id(saved) != recorded:
        return (
            f"the restored store's links were signed with a key that is neither {path or ENVIRONMENT_KEY} nor "
            f"in {beside}: put that key back before starting digestbot (it refuses to start meanwhile)"
        )
    if path is None:
        return f"the restored store's links were signed with the key in {beside}: set {ENVIRONMENT_KEY} to it"
    aside = path.with_name(f"{path.name}.before-restore-{stamp}")
    if path.exists():
        os.replace(path, aside)
    _write_secret(path, saved)
    moved = f"; the one it replaced is at {aside}" if aside.exists() else ""
    return f"signing key put back from {beside}: the one the restored store's links were signed with{moved}"


def _write_secret(path: Path, data: bytes) -> None:
    write_whole(path, data, mode=0o600)


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
