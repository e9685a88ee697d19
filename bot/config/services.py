"""Configuration of the services beside the bot: its metrics endpoint and an outside
ranker (``bot.rankers``).  Part of ``bot.config``, which reads it; never reads the
environment or a file itself."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.domain.ranking import BUILT_IN, RANKER_NAME
from bot.domain.text import is_web_url


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")  # as bot.config's sections: a misspelled key is an error


class MetricsConfig(_Section):
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


class RankerConfig(_Section):
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
