"""Subscriber endpoint: serving the app with uvicorn (``digestbot serve``).

Never handles a request itself (``bot.web.app`` does).
"""

from __future__ import annotations

import socket
from pathlib import Path
from types import FrameType
from typing import Any

from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette

from bot.config import WebConfig, load_settings
from bot.mail.parts import Parts
from bot.store.engine import make_engine, sessions
from bot.store.store_holders import hold
from bot.web.app import create_app
from bot.web.connections import ConnectionLimits

# A request answers within seconds (an unsubscribe the journal cannot take is a 503 after
# ``ACK_SECONDS``); a stop waits no longer than this for one that does not.
STOP_SECONDS = 10


def app_from_environment() -> Starlette:
    """The app as each of several uvicorn worker processes makes it: the configuration
    from ``$DIGESTBOT_CONFIG`` and the ``DIGESTBOT_*`` variables, as the CLI reads it."""
    settings = load_settings()
    database = settings.database
    engine = make_engine(
        settings.database_url, busy_timeout_ms=database.busy_timeout_ms, sqlite_cache_mb=database.sqlite_cache_mb
    )
    if engine.dialect.name == "sqlite" and engine.url.database:
        hold(Path(engine.url.database))  # as the command that started it: no restore or copy meanwhile
    return create_app(settings, sessions(engine), loaded=Parts(settings))


def uvicorn_options(web: WebConfig) -> dict[str, Any]:
    """What every uvicorn we start is told: X-Forwarded-* only from the proxies the
    operator names, the guarded connections (``bot.web.connections``), no access log
    (request lines carry the token of whoever clicked), no Server header, and a stop
    that waits for the requests in flight ``STOP_SECONDS`` at most."""
    return {
        "http": "bot.web.connections:GuardedHttp",
        "timeout_graceful_shutdown": STOP_SECONDS,
        "proxy_headers": bool(web.trusted_proxies),
        "forwarded_allow_ips": ",".join(web.trusted_proxies) or "127.0.0.1",
        "timeout_keep_alive": 5,
        "access_log": False,
        "server_header": False,
        "log_level": "info",
        "log_config": None,  # digestbot's own handler and format (bot.logs)
    }


def serve(loaded: Parts, factory: sessionmaker[Session], *, host: str, port: int, workers: int = 1) -> None:
    """Run the endpoint with uvicorn until SIGINT/SIGTERM (the ``digestbot serve`` command);
    with *workers* > 1, in that many processes sharing the port (each makes its own app
    from the same files, after this process found every part loads)."""
    import uvicorn

    settings = loaded.check().settings
    options = uvicorn_options(settings.web)
    limits = ConnectionLimits(settings.web.header_timeout_seconds, settings.web.max_connections)
    listening = listening_socket(host, port)  # here, not by uvicorn: a port in use is one line
    if workers > 1:
        config = uvicorn.Config(
            "bot.web.server:app_from_environment", factory=True, workers=workers, host=host, port=port, **options
        )
        config.digestbot_limits = limits  # type: ignore[attr-defined]  # read by GuardedHttp in each worker
        _run_workers(config, listening)
        return

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            # uvicorn re-raises the signal after its graceful shutdown (exit status 143);
            # a clean stop exits 0 here, as the scheduler and worker do.
            getattr(self, "_captured_signals", []).clear()

    config = uvicorn.Config(create_app(settings, factory, loaded=loaded), host=host, port=port, **options)
    config.digestbot_limits = limits  # type: ignore[attr-defined]
    Server(config).run(sockets=[listening])


class CannotListen(Exception):
    """The endpoint's address cannot be listened on; ``str()`` is one line."""


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to *host*:*port* as uvicorn binds one (reusable address, kept by
    worker processes); ``CannotListen`` when the port is taken or the address not here."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _run_workers(config: Any, listening: socket.socket) -> None:
    """uvicorn.run's multi-process branch, for a config made here (uvicorn.run makes its
    own, and the limits must travel with it to each worker)."""
    from uvicorn.supervisors import Multiprocess

    Multiprocess(config, sockets=[listening]).run()
