"""Subscriber endpoint: serving the app with uvicorn (``digestbot serve``).

Never handles a request itself (``bot.web.app`` does).
"""

from __future__ import annotations

from types import FrameType

from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette

from bot.config import Settings, load_settings
from bot.store.engine import make_engine, sessions
from bot.web.app import create_app


def app_from_environment() -> Starlette:
    """The app as each of several uvicorn worker processes makes it: the configuration
    from ``$DIGESTBOT_CONFIG`` and the ``DIGESTBOT_*`` variables, as the CLI reads it."""
    settings = load_settings()
    database = settings.database
    engine = make_engine(
        settings.database_url, busy_timeout_ms=database.busy_timeout_ms, sqlite_cache_mb=database.sqlite_cache_mb
    )
    return create_app(settings, sessions(engine))


def serve(settings: Settings, factory: sessionmaker[Session], *, host: str, port: int, workers: int = 1) -> None:
    """Run the endpoint with uvicorn until SIGINT/SIGTERM (the ``digestbot serve`` command);
    with *workers* > 1, in that many processes sharing the port (each makes its own app)."""
    import uvicorn

    if workers > 1:
        # access_log off: request lines carry the token of whoever clicked.
        uvicorn.run(
            "bot.web.server:app_from_environment",
            factory=True,
            workers=workers,
            host=host,
            port=port,
            access_log=False,
            proxy_headers=True,
            server_header=False,
            log_level="info",
            log_config=None,  # digestbot's own handler and format (bot.logs)
        )
        return

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            # uvicorn re-raises the signal after its graceful shutdown (exit status 143);
            # a clean stop exits 0 here, as the scheduler and worker do.
            getattr(self, "_captured_signals", []).clear()

    # access_log off: request lines carry the token of whoever clicked.
    config = uvicorn.Config(
        create_app(settings, factory),
        host=host,
        port=port,
        access_log=False,
        proxy_headers=True,
        server_header=False,
        log_level="info",
    )
    Server(config).run()
