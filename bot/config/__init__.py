"""Configuration: one TOML file, every value overridable by ``DIGESTBOT_*`` env vars.

Loaded once per process and passed down explicitly; nothing else in the
package reads the environment.  This module must never print or log a secret:
the SMTP password lives in a ``SecretStr`` and may only come from the
environment or from a file named by ``smtp.password_file``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from bot.config.errors import ENV_PREFIX
from bot.config.errors import ConfigError as ConfigError  # where the rest of bot imports them from
from bot.config.errors import read_secret_file as read_secret_file
from bot.config.services import LlmConfig, MetricsConfig, RankerConfig
from bot.config.values import address_or_network, dns_name, greeting_name
from bot.domain.text import CONTROL_CHARACTERS, hides_control_characters, is_web_url, shown_url
from bot.shipped import TAG_RULES, TEMPLATES, shipped

DEFAULT_CONFIG_PATH = Path("config/digestbot.toml")


class _Section(BaseModel):
    # A misspelled key ("prot") is an error, not a silently kept default.
    model_config = ConfigDict(extra="forbid")


class PathsConfig(_Section):
    var_dir: Path = Path("var")
    dump_dir: Path = Path("seeds")
    # The shipped templates and tag rules wherever digestbot runs from; point these
    # at the copies ``digestbot init`` writes to customize them.
    templates_dir: Path = Field(default_factory=lambda: shipped(TEMPLATES))
    tags_file: Path = Field(default_factory=lambda: shipped(TAG_RULES))


class DatabaseConfig(_Section):
    # Empty means "SQLite file digestbot.sqlite3 inside paths.var_dir".
    url: str = ""
    busy_timeout_ms: int = Field(5000, ge=0)
    sqlite_cache_mb: int = Field(64, ge=1)  # page cache per SQLite connection
    # Digests (with what they carried to whom) are removed this many days after they were
    # planned, and no entry first seen before then is offered again (docs/operating.md).
    keep_days: int = Field(365, ge=60, le=36500)


class FeedsConfig(_Section):
    urls: list[str] = []
    timeout_seconds: float = Field(20.0, gt=0)
    max_bytes: int = Field(20_000_000, gt=0)

    @field_validator("urls")
    @classmethod
    def _http_only(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return urls


class WatchConfig(_Section):
    interval_seconds: int = Field(60, ge=1)
    # A file whose mtime is younger than this is assumed to be still written.
    quiet_seconds: float = Field(5.0, ge=0)
    # A bigger file is recorded as failed without being read (a 10,000-entry dump is ~7 MB).
    max_file_bytes: int = Field(32_000_000, gt=0)


class ScheduleConfig(_Section):
    default_timezone: str = "UTC"
    default_send_hour: int = Field(8, ge=0, le=23)
    # A day found with nothing new at the send time stays open until this local hour
    # (24: midnight): entries that arrive before then still go out that day.
    day_closes_hour: int = Field(24, ge=0, le=24)
    # How long past the send time to wait for a dump newer than the subscriber's last
    # digest before planning anyway (0: plan at the send time).
    wait_for_dump_minutes: int = Field(0, ge=0, le=720)


class SubscribersConfig(_Section):
    # What a new subscriber receives first: entries first seen in the last N
    # days ("7d"), "all", or "none".
    default_backfill: str = Field("7d", pattern=r"^(?:all|none|\d{1,4}d)$")
    default_filter: str = "*"
    # A reader's library (the papers their ranking learns from) holds at most this many;
    # the manage page reads at most this many uploads of theirs an hour.
    library_max_papers: int = Field(5000, ge=1, le=100_000)
    library_uploads_per_hour: int = Field(10, ge=1, le=1000)


class SmtpConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(1025, ge=1, le=65535)
    tls: Literal["none", "starttls", "tls"] = "none"
    verify_certificates: bool = True
    username: str = ""
    password: SecretStr = SecretStr("")
    password_file: Path | None = None
    timeout_seconds: float = Field(30.0, gt=0)  # one whole message: connect to 250 after DATA
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


class SenderConfig(_Section):
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


def site_url(web: WebConfig) -> str:
    """Where the subscriber pages are reached: ``public_url``, else ``digestbot serve``'s
    own address (enough on one machine; links in mail to others need ``public_url``)."""
    if web.public_url:
        return web.public_url.rstrip("/")
    host = web.listen_host if web.listen_host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"http://[{host}]:{web.listen_port}" if ":" in host else f"http://{host}:{web.listen_port}"


def feedback_id_of(sender: SenderConfig) -> str:
    """The Feedback-ID header's value ("" for none)."""
    domain = sender.from_address.rpartition("@")[2] or "localhost"
    return sender.feedback_id.replace("{list_id}", sender.list_id).replace("{domain}", domain)


class DigestConfig(_Section):
    max_entries: int = Field(30, ge=1)  # the rest rolls into the next digest, best first
    # Left-over entries (beyond max_entries) roll over for at most this many days.
    max_age_days: int = Field(30, ge=1, le=3650)
    # Longer summaries are cut at a sentence near this length (0: always whole).
    summary_chars: int = Field(400, ge=0, le=100_000)
    send_empty: bool = False
    # Papers without an arXiv/DOI link or URL in their summary link to this search.
    search_url: str = "https://arxiv.org/search/?query={title}&searchtype=title"
    lease_seconds: int = Field(300, ge=10)  # a "sending" row older than this is retried
    # Feed HTML may carry <img>; off by default (remote images track readers), https only when on.
    remote_images: bool = False
    # Processes that build messages while this one sends (0: build here, between sends).
    build_processes: int = Field(0, ge=0, le=16)
    # "Top picks for you": the entries a reader's model scores highest, above the contents (0: none).
    top_picks: int = Field(3, ge=0, le=10)


class WebConfig(_Section):
    # e.g. "https://digest.example.org": enables https List-Unsubscribe and manage links.
    public_url: str = ""

    # It goes into every message's List-Unsubscribe header.
    @field_validator("public_url")
    @classmethod
    def _plain_url(cls, value: str) -> str:
        if value and (not is_web_url(value) or "=?" in value or "," in value):
            raise ValueError("must be an http(s) URL without spaces, commas, quotes, angle brackets or '=?'")
        return value

    # HMAC key for unsubscribe tokens: env DIGESTBOT_WEB__SIGNING_KEY, or this file,
    # or (neither) a random key created once in <var_dir>/signing.key.
    signing_key: SecretStr = SecretStr("")
    signing_key_file: Path | None = None
    # Where ``digestbot serve`` listens (behind a TLS-terminating proxy at public_url).
    listen_host: str = "127.0.0.1"
    listen_port: int = Field(8080, ge=1, le=65535)
    # Requests whose token names no subscriber, per client address: this many a second
    # on average, this many at once; beyond, 429 (0: no limit).  Valid tokens never count.
    misses_per_second: float = Field(20.0, ge=0)
    misses_burst: int = Field(200, ge=1)
    # The public sign-up page /subscribe (double opt-in; needs public_url for its links).
    signup: bool = False
    # How long the link in a confirmation mail works; an unconfirmed sign-up is deleted then.
    confirm_hours: int = Field(48, ge=1, le=720)
    # At most one sign-up mail per address in this many minutes.
    confirm_interval_minutes: int = Field(10, ge=1, le=10080)
    # At most this many sign-ups per client IP address (IPv6: per /64) in an hour.
    signups_per_hour: int = Field(10, ge=1)
    # The reverse proxies (addresses or networks) whose X-Forwarded-For and
    # X-Forwarded-Proto are believed; from anyone else those headers are ignored.
    trusted_proxies: list[Annotated[str, AfterValidator(address_or_network)]] = []
    # A request's headers must arrive within this long; at most max_connections are
    # open at once (fewer where the process may open fewer files).
    header_timeout_seconds: float = Field(10.0, gt=0, le=300)
    max_connections: int = Field(1000, ge=8)


DnsName = Annotated[str, AfterValidator(dns_name)]
DkimAlgorithm = Literal["rsa-sha256", "ed25519-sha256"]


class DkimKey(_Section):
    """One more key every message is signed with, for the same domain."""

    selector: DnsName
    key_file: Path
    algorithm: DkimAlgorithm = "ed25519-sha256"


class DkimConfig(_Section):
    # DKIM-sign every message (off while domain is empty; most relays sign for you).
    domain: DnsName = ""
    selector: DnsName = ""
    key_file: Path | None = None  # RSA: a PEM private key; Ed25519: dknewkey's base64 key
    algorithm: DkimAlgorithm = "rsa-sha256"
    # More signatures on every message (RFC 8463: RSA and Ed25519 together, since not
    # every verifier knows Ed25519), each [[dkim.additional_keys]] with its own selector.
    additional_keys: list[DkimKey] = []


class InboxConfig(_Section):
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


class _TomlWithoutSecrets(TomlConfigSettingsSource):
    """The TOML source, refusing secrets: a config file gets copied and committed."""

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        secrets = (
            ("smtp", "password", "SMTP__PASSWORD"),
            ("web", "signing_key", "WEB__SIGNING_KEY"),
            ("inbox", "password", "INBOX__PASSWORD"),
            ("llm", "api_key", "LLM__API_KEY"),
        )
        for section, key, env in secrets:
            table = data.get(section)
            if isinstance(table, dict) and key in table:
                raise ConfigError(
                    f"{self.toml_file_path}: {section}.{key} is not allowed in the config file; "
                    f"set {ENV_PREFIX}{env} or {section}.{key}_file"
                )
        return data


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        toml_file=None,
    )

    paths: PathsConfig = PathsConfig()
    database: DatabaseConfig = DatabaseConfig()
    feeds: FeedsConfig = FeedsConfig()
    watch: WatchConfig = WatchConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    subscribers: SubscribersConfig = SubscribersConfig()
    smtp: SmtpConfig = SmtpConfig()
    sender: SenderConfig = SenderConfig()
    digest: DigestConfig = DigestConfig()
    web: WebConfig = WebConfig()
    metrics: MetricsConfig = MetricsConfig()
    dkim: DkimConfig = DkimConfig()
    inbox: InboxConfig = InboxConfig()
    ranker: RankerConfig = RankerConfig()
    llm: LlmConfig = LlmConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlWithoutSecrets(settings_cls))

    @property
    def database_url(self) -> str:
        if self.database.url:
            return self.database.url
        return f"sqlite:///{self.paths.var_dir / 'digestbot.sqlite3'}"

    def redacted(self) -> dict[str, Any]:
        """A JSON-able view for ``digestbot config show``; secrets masked."""
        data = self.model_dump(mode="json")
        data["smtp"]["password"] = "**********" if self.smtp.password.get_secret_value() else ""
        data["web"]["signing_key"] = "**********" if self.web.signing_key.get_secret_value() else ""
        data["inbox"]["password"] = "**********" if self.inbox.password.get_secret_value() else ""
        data["database"]["effective_url"] = _mask_url_password(self.database_url)
        data["database"]["url"] = _mask_url_password(data["database"]["url"])
        data["feeds"]["urls"] = [shown_url(url) for url in self.feeds.urls]
        data["ranker"]["url"] = shown_url(self.ranker.url) if self.ranker.url else ""
        data["llm"]["api_key"] = "**********" if self.llm.api_key.get_secret_value() else ""
        data["llm"]["base_url"] = shown_url(self.llm.base_url) if self.llm.base_url else ""
        return data


def _mask_url_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    if not url:
        return url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # a malformed URL is reported when it is used, not here
        return url


def load_settings(path: Path | None = None) -> Settings:
    """Load settings from *path* (or ``$DIGESTBOT_CONFIG``, or ``config/digestbot.toml``
    when present, or embedded defaults) with environment overrides on top."""
    from pydantic import ValidationError

    from bot.config.errors import explain, unparsable_variable

    if path is None and os.environ.get(f"{ENV_PREFIX}CONFIG"):
        path = Path(os.environ[f"{ENV_PREFIX}CONFIG"])
    if path is None and DEFAULT_CONFIG_PATH.is_file():
        path = DEFAULT_CONFIG_PATH
    if path is not None and not path.is_file():
        raise ConfigError(f"{path}: config file not found")

    class _FileSettings(Settings):
        model_config = SettingsConfigDict(toml_file=path)

    try:
        loaded = _FileSettings()
    except ValidationError as exc:
        raise ConfigError(explain(exc.errors()[0], path, Settings)) from None
    except SettingsError as exc:  # an environment variable that is not the JSON a list or table needs
        raise ConfigError(unparsable_variable(str(exc))) from None
    except (ValueError, OSError) as exc:  # TOML syntax errors surface as ValueError
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{path}: {exc}") from None
    # A plain Settings: pickle (into build processes) finds a class by its module-level name.
    values = {name: getattr(loaded, name) for name in Settings.model_fields}
    return Settings.model_construct(_fields_set=loaded.model_fields_set, **values)
