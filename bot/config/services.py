"""Configuration of the services beside the bot: its metrics endpoint, an outside
ranker (``bot.rankers``) and a language model behind the OpenAI-compatible API
(``bot.llm``).  Part of ``bot.config``, which reads it; never reads the environment
itself, and a file only when a secret is asked for by ``resolved_api_key``."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from bot.config.config_errors import read_secret_file
from bot.domain.llm import LANGUAGE_TAG, MODEL_NAME, chosen_language
from bot.domain.rankers import BUILT_IN, RANKER_NAME
from bot.domain.text import is_web_url


class SettingsSection(BaseModel):
    model_config = ConfigDict(extra="forbid")  # as bot.config's sections: a misspelled key is an error


class MetricsConfig(SettingsSection):
    # /metrics and /healthz of run, scheduler and worker, on a port of their own (0: off).
    listen_host: str = "127.0.0.1"
    listen_port: int = Field(0, ge=0, le=65535)
    # /healthz answers 503 when the planning pass (scheduler) or the delivery run
    # (worker) last succeeded longer ago than this.
    stale_after_minutes: int = Field(15, ge=1)
    # Who may read /metrics on `digestbot serve` (a public port): these networks only.
    allow_from: list[str] = ["127.0.0.0/8", "::1/128"]

    @field_validator("allow_from")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        import ipaddress

        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"{network!r} is not an IP network such as 10.0.0.0/8") from None
        return networks


class RankerConfig(SettingsSection):
    # An outside ranker (docs/rankers.md): "" asks none and sends nothing anywhere.
    url: str = ""
    # Its name in reports and in the readers' ids it is sent (each ranker sees others).
    name: str = Field("challenger", pattern=f"^{RANKER_NAME.pattern}$")
    readers_per_request: int = Field(100, ge=1, le=10_000)
    # What of a reader is sent: their newest library papers and ratings, at most these.
    library_papers: int = Field(200, ge=0, le=5000)
    ratings: int = Field(200, ge=0, le=5000)
    connect_seconds: float = Field(2.0, gt=0, le=60)
    answer_seconds: float = Field(30.0, gt=0, le=600)  # one request's whole answer
    pass_seconds: float = Field(120.0, gt=0, le=3600)  # every request of one planning pass
    max_answer_mb: int = Field(16, ge=1, le=1024)
    attempts: int = Field(3, ge=1, le=10)

    @field_validator("url")
    @classmethod
    def _plain_url(cls, value: str) -> str:
        if value and not is_web_url(value):
            raise ValueError("must be an http(s) URL without spaces, quotes or angle brackets")
        return value

    @field_validator("name")
    @classmethod
    def _not_the_built_in(cls, value: str) -> str:
        if value == BUILT_IN:
            raise ValueError(f"{BUILT_IN!r} names the built-in ranking; give the outside ranker another name")
        return value


class LlmConfig(SettingsSection):
    # A language model behind the OpenAI-compatible API (docs/llm.md): the base URL
    # ("http://127.0.0.1:11434/v1" for Ollama); "" asks none and sends nothing anywhere.
    base_url: str = ""
    chat_model: str = ""  # writes a TL;DR per entry and language; "" writes none
    embedding_model: str = ""  # embeds entries and library papers; "" embeds none
    # DIGESTBOT_LLM__API_KEY, else this file; never in the config file, never shown.
    api_key: SecretStr = SecretStr("")
    api_key_file: Path | None = None
    # The languages a reader may choose for their TL;DR (BCP 47); the first is the default.
    languages: list[str] = ["en"]
    connect_seconds: float = Field(2.0, gt=0, le=60)
    answer_seconds: float = Field(60.0, gt=0, le=600)  # one request's whole answer
    max_answer_kb: int = Field(256, ge=1, le=65_536)  # a longer answer is that entry's failure
    # Requests in flight at once (vLLM and llama.cpp's server answer several together).
    concurrency: int = Field(1, ge=1, le=64)
    # A day's budget (UTC): requests sent, and tokens as the API reports them (0: no limit).
    requests_per_day: int = Field(2_000, ge=0)
    tokens_per_day: int = Field(0, ge=0)

    @field_validator("base_url")
    @classmethod
    def _plain_url(cls, value: str) -> str:
        if value and not is_web_url(value):
            raise ValueError("must be an http(s) URL without spaces, quotes or angle brackets")
        return value.rstrip("/")

    @field_validator("chat_model", "embedding_model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        if value and not MODEL_NAME.fullmatch(value):
            raise ValueError("must be a model's name: letters, digits and . _ : / @ + -, at most 200")
        return value

    @field_validator("languages")
    @classmethod
    def _language_tags(cls, tags: list[str]) -> list[str]:
        if not tags:
            raise ValueError("must name at least one language, e.g. ['en']")
        for tag in tags:
            if not LANGUAGE_TAG.fullmatch(tag):
                raise ValueError(f"{tag!r} is not a BCP 47 language tag such as en, zh, de-CH or zh-Hant")
        if len({tag.casefold() for tag in tags}) != len(tags):
            raise ValueError("names a language twice")
        return tags

    @property
    def enabled(self) -> bool:
        """Whether anything is ever sent: a base URL and at least one model."""
        return bool(self.base_url and (self.chat_model or self.embedding_model))

    def tldr_language(self, choice: str | None) -> str | None:
        """The language a reader's digests show TL;DRs in (``chosen_language``); None
        when no chat model writes any."""
        return chosen_language(choice, self.languages) if self.enabled and self.chat_model else None

    def resolved_api_key(self) -> SecretStr:
        """The key from the environment, else from ``api_key_file``; never logged."""
        if self.api_key.get_secret_value() or self.api_key_file is None:
            return self.api_key
        return SecretStr(read_secret_file(self.api_key_file, "llm.api_key_file"))


class ChannelsConfig(SettingsSection):
    # Chat rooms digests are posted to (docs/channels.md); each destination is a secret,
    # given by `digestbot channels add`, never here.
    connect_seconds: float = Field(5.0, gt=0, le=60)
    answer_seconds: float = Field(15.0, gt=0, le=300)  # one part's whole answer
    attempts: int = Field(6, ge=1, le=20)  # of a digest whose parts were not posted
    retry_base_seconds: float = Field(60.0, gt=0, le=3600)
    retry_max_seconds: float = Field(3600.0, gt=0, le=86400)
    most_parts: int = Field(4, ge=1, le=20)  # messages a digest may take; the rest "more on the web"
    lease_seconds: int = Field(120, ge=10, le=3600)


class ZoteroConfig(SettingsSection):
    # The Zotero Web API (v3) readers connect their libraries on (docs/zotero.md).
    base_url: str = "https://api.zotero.org"
    # A connected library is synced this often (and at once after its reader connects).
    sync_hours: float = Field(6.0, gt=0, le=168)
    connect_seconds: float = Field(5.0, gt=0, le=60)
    answer_seconds: float = Field(30.0, gt=0, le=600)  # one request's whole answer
    max_answer_mb: int = Field(8, ge=1, le=256)  # a longer answer is that pass's failure
    in_flight: int = Field(4, ge=1, le=16)  # requests at once, every reader's together
    # The longest a Retry-After (429, 503) or a Backoff is waited out within a pass;
    # a longer one ends the pass for every reader (the next one asks again).
    longest_wait_seconds: float = Field(60.0, ge=0, le=3600)
    attempts: int = Field(3, ge=1, le=10)  # of one request answered 429, 503 or not at all

    @field_validator("base_url")
    @classmethod
    def _plain_url(cls, value: str) -> str:
        if not is_web_url(value):
            raise ValueError("must be an http(s) URL without spaces, quotes or angle brackets")
        return value.rstrip("/")
