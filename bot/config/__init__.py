"""Configuration: one TOML file, every value overridable by ``DIGESTBOT_*`` env vars.

Loaded once per process and passed down explicitly; nothing else in the
package reads the environment.  This module must never print or log a secret:
the SMTP password lives in a ``SecretStr`` and may only come from the
environment or from a file named by ``smtp.password_file``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from bot.config.config_errors import ENV_PREFIX
from bot.config.config_errors import ConfigError as ConfigError  # where the rest of bot imports them from
from bot.config.config_errors import read_secret_file as read_secret_file
from bot.config.mail import DkimConfig as DkimConfig  # where the rest of bot imports them from
from bot.config.mail import DkimKey as DkimKey
from bot.config.mail import InboxConfig as InboxConfig
from bot.config.mail import SenderConfig as SenderConfig
from bot.config.mail import SmtpConfig as SmtpConfig
from bot.config.mail import feedback_id_of as feedback_id_of
from bot.config.services import (
    ChannelsConfig,
    LlmConfig,
    MetricsConfig,
    RankerConfig,
    SettingsSection,
    ZoteroConfig,
)
from bot.config.values import address_or_network
from bot.config.values import dns_name as dns_name
from bot.config.values import greeting_name as greeting_name
from bot.domain.arxiv_sources import DEFAULT_BASE as DEFAULT_ARXIV_BASE
from bot.domain.arxiv_sources import categories_of, feed_url, is_arxiv_source
from bot.domain.stored import zone_exists
from bot.domain.text import CONTROL_CHARACTERS as CONTROL_CHARACTERS
from bot.domain.text import hides_control_characters as hides_control_characters
from bot.domain.text import is_web_url, shown_url
from bot.shipped import TAG_RULES, TEMPLATES, shipped

DEFAULT_CONFIG_PATH = Path("config/digestbot.toml")


class PathsConfig(SettingsSection):
    var_dir: Path = Path("var")
    dump_dir: Path = Path("seeds")
    # The shipped templates and tag rules wherever digestbot runs from; point these
    # at the copies ``digestbot init`` writes to customize them.
    templates_dir: Path = Field(default_factory=lambda: shipped(TEMPLATES))
    tags_file: Path = Field(default_factory=lambda: shipped(TAG_RULES))


class DatabaseConfig(SettingsSection):
    # Empty means "SQLite file digestbot.sqlite3 inside paths.var_dir".
    url: str = ""
    busy_timeout_ms: int = Field(5000, ge=0)
    sqlite_cache_mb: int = Field(64, ge=1)  # page cache per SQLite connection
    # Digests (with what they carried to whom) are removed this many days after they were
    # planned, and no entry first seen before then is offered again (docs/operating.md).
    keep_days: int = Field(365, ge=60, le=36500)


class FeedsConfig(SettingsSection):
    # Feed URLs, and arXiv categories as "arxiv:cs.LG" or "arxiv:cs.LG+cs.CL" (arXiv's RSS).
    urls: list[str] = []
    timeout_seconds: float = Field(20.0, gt=0)
    max_bytes: int = Field(20_000_000, gt=0)
    arxiv_base_url: str = DEFAULT_ARXIV_BASE  # where "arxiv:" sources are fetched from

    @field_validator("urls")
    @classmethod
    def _http_only(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if is_arxiv_source(url):
                categories_of(url)  # ArxivSourceError is a ValueError: said as this key's problem
            elif not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is neither an http(s) URL nor an arXiv source such as 'arxiv:cs.LG'")
        return urls

    @field_validator("arxiv_base_url")
    @classmethod
    def _arxiv_base(cls, value: str) -> str:
        if not is_web_url(value):
            raise ValueError("must be an http(s) URL without spaces, quotes or angle brackets")
        return value.rstrip("/")

    def fetched_url(self, source: str) -> str:
        """The URL a source is fetched from: itself, or arXiv's feed of its categories."""
        return feed_url(source, self.arxiv_base_url) if is_arxiv_source(source) else source


class WatchConfig(SettingsSection):
    interval_seconds: int = Field(60, ge=1)
    # A file whose mtime is younger than this is assumed to be still written.
    quiet_seconds: float = Field(5.0, ge=0)
    # A bigger file is recorded as failed without being read (a 10,000-entry dump is ~7 MB).
    max_file_bytes: int = Field(32_000_000, gt=0)


class ScheduleConfig(SettingsSection):
    default_timezone: str = "UTC"  # an IANA zone (e.g. Europe/Berlin): new readers get it

    # A zone this machine does not have would make every reader added after it a reader of UTC.
    @field_validator("default_timezone")
    @classmethod
    def _existing_zone(cls, value: str) -> str:
        name = value.strip()
        if zone_exists(name):
            return name
        import difflib
        import zoneinfo

        close = difflib.get_close_matches(name, sorted(zoneinfo.available_timezones()), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{name!r} is not an IANA time zone (e.g. Europe/Berlin){hint}")

    default_send_hour: int = Field(8, ge=0, le=23)
    # A day found with nothing new at the send time stays open until this local hour
    # (24: midnight): entries that arrive before then still go out that day.
    day_closes_hour: int = Field(24, ge=0, le=24)
    # How long past the send time to wait for a dump newer than the subscriber's last
    # digest before planning anyway (0: plan at the send time).
    wait_for_dump_minutes: int = Field(0, ge=0, le=720)


class SubscribersConfig(SettingsSection):
    # What a new subscriber receives first: entries first seen in the last N
    # days ("7d"), "all", or "none".
    default_backfill: str = Field("7d", pattern=r"^(?:all|none|\d{1,4}d)$")
    default_filter: str = "*"
    # A reader's library (the papers their ranking learns from) holds at most this many;
    # the manage page reads at most this many uploads of theirs an hour.
    library_max_papers: int = Field(5000, ge=1, le=100_000)
    library_uploads_per_hour: int = Field(10, ge=1, le=1000)


def site_url(web: WebConfig) -> str:
    """Where the subscriber pages are reached: ``public_url``, else ``digestbot serve``'s
    own address (enough on one machine; links in mail to others need ``public_url``)."""
    if web.public_url:
        return web.public_url.rstrip("/")
    host = web.listen_host if web.listen_host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"http://[{host}]:{web.listen_port}" if ":" in host else f"http://{host}:{web.listen_port}"


class DigestConfig(SettingsSection):
    max_entries: int = Field(30, ge=1)  # the rest rolls into the next digest, best first
    # Left-over entries (beyond max_entries) roll over for at most this many days.
    max_age_days: int = Field(30, ge=1, le=3650)
    # Longer summaries are cut at a sentence near this length (0: always whole).
    summary_chars: int = Field(400, ge=0, le=100_000)
    send_empty: bool = False
    # Papers without an arXiv/DOI link or URL in their summary link to this search.
    search_url: str = "https://arxiv.org/search/?query={title}&searchtype=title"
    # A worker's hold on the digests it claimed, renewed while it sends; one that runs out
    # makes them due again (unknown, for those on the wire: never sent again by itself).
    lease_seconds: int = Field(300, ge=10)
    # A stop (SIGTERM, Ctrl-C) lets the messages on the wire be answered this long, then
    # records the unanswered as unknown; under the service manager's own stop timeout.
    stop_seconds: float = Field(30.0, gt=0, le=600)
    # Feed HTML may carry <img>; off by default (remote images track readers), https only when on.
    remote_images: bool = False
    # Processes that build messages while this one sends (0: build here, between sends).
    build_processes: int = Field(0, ge=0, le=16)
    # "Top picks for you": the entries a reader's model scores highest, above the contents (0: none).
    top_picks: int = Field(3, ge=0, le=10)


class WebConfig(SettingsSection):
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
    zotero: ZoteroConfig = ZoteroConfig()
    channels: ChannelsConfig = ChannelsConfig()

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
        data["zotero"]["base_url"] = shown_url(self.zotero.base_url)
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

    from bot.config.config_errors import explain, unparsable_variable

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
