"""Configuration: the sections about mail: how it goes out (``[smtp]``), who it is from
and how it is marked (``[sender]``), how it is signed (``[dkim]``) and where what comes
back is read (``[inbox]``).  Validates values; never connects, reads a mailbox or logs
a secret (passwords only from the environment or a file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, field_validator

from bot.config.config_errors import ENV_PREFIX, read_secret_file
from bot.config.services import SettingsSection
from bot.config.values import dns_name, greeting_name
from bot.domain.text import CONTROL_CHARACTERS, hides_control_characters


class SmtpConfig(SettingsSection):
    host: str = "127.0.0.1"
    port: int = Field(1025, ge=1, le=65535)
    tls: Literal["none", "starttls", "tls"] = "none"
    verify_certificates: bool = True
    username: str = ""
    password: SecretStr = SecretStr("")
    password_file: Path | None = None
    timeout_seconds: float = Field(30.0, gt=0)  # each step before the final dot: connect, MAIL, RCPT, DATA
    # The reply to the final dot: RFC 5321 4.5.3.2.6 gives it ten minutes (a client that gives
    # up sooner makes the server deliver twice, RFC 1047); none seen is "unknown", never resent.
    final_reply_seconds: float = Field(600.0, gt=0, le=3600)
    pool_size: int = Field(2, ge=1, le=64)  # connections kept open and reused
    rate_per_second: float = Field(0.0, ge=0)  # 0: no limit
    max_attempts: int = Field(6, ge=1)  # 4xx/disconnect/timeout retries before "failed"
    retry_base_seconds: float = Field(60.0, gt=0)  # backoff: base * 2^(attempt-1), plus jitter
    retry_max_seconds: float = Field(3600.0, gt=0)
    bounce_codes: list[int] = [550, 551, 553]
    bounce_threshold: int = Field(1, ge=1)  # permanent failures with those codes before "bounced"
    # The name EHLO gives; "" chooses one (bot.delivery.smtp.helo_name), never "localhost".
    helo_name: Annotated[str, AfterValidator(greeting_name)] = ""

    def resolved_password(self) -> SecretStr:
        """The password from the env, else from ``password_file``; never logged."""
        return _password(self.password, self.password_file, "smtp.password_file")


def _password(given: SecretStr, path: Path | None, setting: str) -> SecretStr:
    if given.get_secret_value():
        return given
    return SecretStr(read_secret_file(path, setting)) if path is not None else SecretStr("")


class SenderConfig(SettingsSection):
    from_address: str = "digestbot@localhost"
    from_name: str = "digestbot"
    list_id: str = "digest.digestbot.localhost"
    # Where "mailto:" unsubscribe requests go (default: from_address).
    unsubscribe_address: str = ""
    # VERP: each digest's envelope sender becomes bounces+<token>@domain (bot.mail.verp);
    # "" sends with from_address.  The domain must deliver "+" addresses to this mailbox.
    bounce_address: str = ""
    # Gmail's feedback loop: "" sends no Feedback-ID header; "{list_id}" and "{domain}"
    # are filled in, e.g. "digest:{list_id}:{domain}".
    feedback_id: str = ""

    # These go into every message's headers: a line break in one would add headers.
    @field_validator("from_name")
    @classmethod
    def _one_line_name(cls, value: str) -> str:
        if CONTROL_CHARACTERS.search(value) or hides_control_characters(value):
            raise ValueError("contains control characters (line breaks included, RFC 2047 encoded or not)")
        return value

    @field_validator("bounce_address")
    @classmethod
    def _verp_base(cls, value: str) -> str:
        local, at, domain = value.rpartition("@")
        if value and (not at or not local or not domain or "+" in local):
            raise ValueError("must be an address like bounces@example.org, without '+' (digestbot adds +TOKEN)")
        return value

    @field_validator("from_address", "list_id", "unsubscribe_address", "feedback_id", "bounce_address")
    @classmethod
    def _no_spaces_or_controls(cls, value: str) -> str:
        if "=?" in value or CONTROL_CHARACTERS.search(value) or any(c.isspace() or c in '<>",' for c in value):
            raise ValueError("must not contain spaces, control characters, quotes, commas, angle brackets or '=?'")
        return value


def feedback_id_of(sender: SenderConfig) -> str:
    """The Feedback-ID header's value ("" for none)."""
    domain = sender.from_address.rpartition("@")[2] or "localhost"
    return sender.feedback_id.replace("{list_id}", sender.list_id).replace("{domain}", domain)


DnsName = Annotated[str, AfterValidator(dns_name)]
DkimAlgorithm = Literal["rsa-sha256", "ed25519-sha256"]


class DkimKey(SettingsSection):
    """One more key every message is signed with, for the same domain."""

    selector: DnsName
    key_file: Path
    algorithm: DkimAlgorithm = "ed25519-sha256"


class DkimConfig(SettingsSection):
    # DKIM-sign every message (off while domain is empty; most relays sign for you).
    domain: DnsName = ""
    selector: DnsName = ""
    key_file: Path | None = None  # RSA: a PEM private key; Ed25519: dknewkey's base64 key
    algorithm: DkimAlgorithm = "rsa-sha256"
    # More signatures on every message (RFC 8463: RSA and Ed25519 together, since not
    # every verifier knows Ed25519), each [[dkim.additional_keys]] with its own selector.
    additional_keys: list[DkimKey] = []


class InboxConfig(SettingsSection):
    # Where bounces, complaints and unsubscribe mails arrive (docs/deliverability.md, "Mail that comes
    # back"): "imaps://user@host[:port]/FOLDER" or "maildir:///path"; "" reads nothing.
    url: str = ""
    password: SecretStr = SecretStr("")  # IMAP only: DIGESTBOT_INBOX__PASSWORD, else password_file
    password_file: Path | None = None
    verify_certificates: bool = True
    timeout_seconds: float = Field(30.0, gt=0)
    interval_minutes: int = Field(10, ge=1)  # how often `run` and `scheduler` read it
    # Mail that is none of those stays unread where it is, or is moved to this folder.
    other_folder: str = ""
    # This many soft bounces (4.x.x, mailbox full) within soft_bounce_days make an address bounced.
    soft_bounce_limit: int = Field(3, ge=1)
    soft_bounce_days: int = Field(14, ge=1)
    # A bigger message is left for a person unread: no bounce or report is that long.
    max_message_bytes: int = Field(5_000_000, ge=10_000)

    @field_validator("url")
    @classmethod
    def _mailbox_url(cls, value: str) -> str:
        from urllib.parse import urlsplit

        if not value:
            return value
        if CONTROL_CHARACTERS.search(value) or any(c.isspace() for c in value):
            raise ValueError("must not contain spaces or control characters")
        parts = urlsplit(value)
        try:
            _ = parts.port
        except ValueError:
            raise ValueError("the port must be a number from 1 to 65535") from None
        if parts.scheme == "maildir" and parts.path and not parts.netloc:
            return value
        if parts.scheme == "imaps" and parts.hostname and parts.username:
            if parts.password is not None:
                raise ValueError(f"holds a password; set {ENV_PREFIX}INBOX__PASSWORD or inbox.password_file instead")
            return value
        raise ValueError("must be imaps://user@host/FOLDER or maildir:///path/to/Maildir")

    @field_validator("other_folder")
    @classmethod
    def _folder_name(cls, value: str) -> str:
        if CONTROL_CHARACTERS.search(value) or any(c in value for c in '"\\*%/'):
            raise ValueError("must be a folder name without quotes, backslashes, '/', '*' or '%'")
        return value.strip()

    def resolved_password(self) -> SecretStr:
        """The password from the env, else from ``password_file``; never logged."""
        return _password(self.password, self.password_file, "inbox.password_file")
