"""Logging set-up for every command: one line per event, text or JSON, on stderr.

The default level depends on the process: a daemon (``run``, ``scheduler``,
``worker``, ``serve``) logs each event that matters at INFO; a one-shot command
prints its own report and logs only warnings.  ``-v`` shows INFO, ``-vv``
DEBUG, including APScheduler's job chatter, which is otherwise held at WARNING.
Never logs secrets: callers pass redacted values.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries whose INFO lines are per tick or per request, not per event.
CHATTY = ("apscheduler", "uvicorn.access", "alembic")
# Libraries that log each request's URL as given, a password in it included: held at
# WARNING even with -vv (the fetch's own lines name a feed as ``shown_url`` does).
REQUEST_URLS = ("httpx", "httpcore")
# Libraries that log a traceback for an exception they raise again to us, who say it in
# one line (flufl.bounce: a detector that fails on a returned message): -vv shows them.
RAISE_AGAIN = ("flufl.bounce",)


def configure(verbosity: int, log_format: LogFormat, *, daemon: bool = False) -> None:
    """Set the root handler (replacing any earlier one) and the levels."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",  # ISO 8601, UTC
                json_ensure_ascii=False,
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    base = logging.INFO if daemon else logging.WARNING
    root.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO if verbosity == 1 else base)
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if verbosity >= 2 else logging.WARNING)
    for name in REQUEST_URLS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in RAISE_AGAIN:
        logging.getLogger(name).setLevel(logging.NOTSET if verbosity >= 2 else logging.CRITICAL)
