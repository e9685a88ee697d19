"""How a process that delivers stops: SIGTERM and SIGINT on its event loop.  The first
sets the stop (a delivery then claims nothing more, gives back what is not on the wire
and waits for the replies to what is, at most ``digest.stop_seconds``); a second exits
at once, leaving what was on the wire to the crash window docs/operating.md names.
Used by the daemon and by the commands that deliver; never sends or writes itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger("bot.run.scheduler")  # the daemon's lines keep the name operators filter by

EXIT_STOPPED_AT_ONCE = 130  # a second SIGTERM or Ctrl-C (128 + SIGINT, as shells report it)
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The stop signals of the running loop, for as long as the block runs."""

    def __init__(self, stop: asyncio.Event, *, stop_seconds: float) -> None:
        self.stop, self.stop_seconds = stop, stop_seconds

    def __enter__(self) -> StopSignals:
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self.asked, sig)
        return self

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)

    def asked(self, sig: signal.Signals) -> None:
        if not self.stop.is_set():
            log.warning(
                "stop asked (%s): no more claims; what is on the wire gets %g s to be answered; again to exit at once",
                sig.name,
                self.stop_seconds,
            )
            self.stop.set()
            return
        log.warning("stop asked again (%s): exiting at once; what was on the wire is left unrecorded", sig.name)
        logging.shutdown()
        os._exit(EXIT_STOPPED_AT_ONCE)


class StoppedBeforeStart(Exception):
    """A stop signal came while the process was starting: nothing was claimed yet."""


@contextmanager
def stop_while_starting() -> Iterator[None]:
    """A SIGTERM or SIGINT that comes while a daemon starts (opening the store, loading
    its parts, before its loop listens for them: ``StopSignals``) raises
    ``StoppedBeforeStart``, for a clean exit, instead of ending the process by the
    signal's default."""

    def asked(signum: int, _: FrameType | None) -> None:
        raise StoppedBeforeStart(signal.Signals(signum).name)

    before = {sig: signal.signal(sig, asked) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
