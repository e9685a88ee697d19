"""Subscriber endpoint: serving the app with uvicorn (``digestbot serve``).

Never handles a request itself (``bot.web.app`` does).
"""

from __future__ import annotations

from types import FrameType

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.web.app import create_app


def serve(settings: Settings, factory: sessionmaker[Session], *, host: str, port: int) -> None:
    """Run the endpoint with uvicorn until SIGINT/SIGTERM (the ``digestbot serve`` command)."""
    import uvicorn

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
