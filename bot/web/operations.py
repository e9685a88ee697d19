"""Subscriber endpoint: what the operator's tools read, ``/healthz`` and ``/metrics``.

``/metrics`` is the queue as Prometheus reads it (``bot.metrics``), for the networks
in ``metrics.allow_from`` only; anyone else gets the answer an unknown path gets.
Reads only; never shows a reader's address or token.
"""

from __future__ import annotations

import ipaddress

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from bot.domain.routes import HEALTH, METRICS
from bot.metrics import Metrics
from bot.web.site import Site


class OperatorPages:
    def __init__(self, site: Site) -> None:
        self.site = site
        self.metrics = Metrics(site.read_only, site.now)
        self.metrics_clients = [ipaddress.ip_network(n, strict=False) for n in site.settings.metrics.allow_from]

    def routes(self) -> list[Route]:
        return [
            Route(HEALTH.pattern, self.health, methods=["GET"]),
            Route(METRICS.pattern, self.metrics_page, methods=["GET"]),
        ]

    async def health(self, _request: Request) -> Response:
        return PlainTextResponse("ok")

    async def metrics_page(self, request: Request) -> Response:
        try:
            address = ipaddress.ip_address(request.client.host if request.client else "")
        except ValueError:
            return self.site.pages.not_found()
        if not any(address in network for network in self.metrics_clients):
            return self.site.pages.not_found()
        body = await run_in_threadpool(self.metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)
