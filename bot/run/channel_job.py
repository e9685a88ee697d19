"""Daemon job: posting the channels' due digests (``bot.channels.delivering``), in a
thread of its own beside the mail's delivery, so that a chat service that stalls never
delays a reader's mail; a stop ends it between two parts (a part on the wire is
answered within ``channels.answer_seconds``), the claims not begun given back."""

from __future__ import annotations

import asyncio
import logging

from bot.run.job_parts import DaemonParts

log = logging.getLogger("bot.run.scheduler")


class PostingToChannels:
    def __init__(self, parts: DaemonParts) -> None:
        self.parts = parts
        self.lock = asyncio.Lock()

    async def post(self) -> None:
        parts = self.parts
        if parts.stop.is_set() or self.lock.locked():
            return
        from bot.channels.delivering import ChannelReport, deliver_channels

        def posting() -> ChannelReport:
            # The signing key is read here, off the loop: its first read may wait on the store.
            return deliver_channels(
                parts.factory,
                parts.settings,
                parts.loaded.key,
                parts.clock,
                worker=parts.worker,
                keep_going=lambda: not parts.stop.is_set(),
            )

        async with self.lock:
            report = await asyncio.to_thread(posting)
        if report.sent or report.retrying or report.failed or report.unknown or report.given_back:
            log.info(
                "channels: %d digests posted (%d parts), %d to try again, %d failed, %d unknown, %d given back",
                report.sent,
                report.parts,
                report.retrying,
                report.failed,
                report.unknown,
                report.given_back,
            )

    async def finish(self) -> None:
        async with self.lock:
            pass
