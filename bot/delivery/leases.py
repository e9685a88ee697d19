"""Delivery stage: the leases a worker holds on the digests it has claimed, kept alive
while they are built and sent.

A claimed batch waits while the one before it is on the wire, and a relay that takes
0.5 messages a second sends 200 in 400 s: longer than any lease.  A lease that runs out
makes its digests due again, and whoever claims them (another worker, or this one for its
next batch) sends them a second time.  So every lease this worker holds is renewed on a
timer (a quarter of the lease) and before each claim (so that this worker never claims
its own waiting digests, whatever the clock says), and a digest whose lease another
worker took meanwhile is never put on the wire.  Never sends, never builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.store.engine import transaction
from bot.store.queue import renew_leases

log = logging.getLogger(__name__)


class Leases:
    """The digest ids of each batch this worker holds, from its claim until it is recorded."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        worker: str,
        lease_seconds: int,
        clock: Callable[[], datetime],
    ) -> None:
        self.factory, self.worker, self.lease_seconds, self.clock = factory, worker, lease_seconds, clock
        self._batches: dict[int, frozenset[int]] = {}
        self._next_batch = 0
        self.lost: set[int] = set()  # reclaimed by another worker: never to be sent by this one
        self.failures = 0  # renewals that failed (the store busy or gone): logged, tried again

    def hold(self, digest_ids: list[int]) -> int:
        """Hold a newly claimed batch; its key, for ``release``."""
        self._next_batch += 1
        self._batches[self._next_batch] = frozenset(digest_ids)
        return self._next_batch

    def release(self, batch: int) -> None:
        self._batches.pop(batch, None)

    def held(self) -> set[int]:
        return set().union(*self._batches.values())

    def renew_in(self, session: Session) -> None:
        """Renew every held lease in *session*'s transaction (before a claim, in its own)."""
        ids = self.held()
        if ids:
            self._settle(ids, *self._renewed(session, ids))

    def claimed(self, digest_ids: list[int]) -> int:
        """Hold a batch this worker just claimed (a digest it lost before and claimed again,
        after a retry, is its own again); its key, for ``release``."""
        self.lost -= set(digest_ids)
        return self.hold(digest_ids)

    def _renewed(self, session: Session, ids: set[int]) -> tuple[set[int], set[int]]:
        return renew_leases(
            session, sorted(ids), worker=self.worker, now=self.clock(), lease_seconds=self.lease_seconds
        )

    def _renew(self, ids: set[int]) -> tuple[set[int], set[int]]:
        with transaction(self.factory) as session:
            return self._renewed(session, ids)

    def _settle(self, asked: set[int], kept: set[int], taken: set[int]) -> None:
        """What a renewal of *asked* found: *taken* by another worker (never to be sent
        here); the rest of *asked* not *kept* was recorded, and is held no longer.  A batch
        claimed while the renewal ran is not among *asked*, and stays held."""
        if taken - self.lost:
            log.warning("%d digests were reclaimed by another worker; this one will not send them", len(taken))
        self.lost |= taken
        done = asked - kept - taken
        if done:
            self._batches = {key: ids - done for key, ids in self._batches.items()}

    async def renew(self) -> None:
        """Renew every held lease, off the event loop."""
        ids = self.held()
        if not ids:
            return
        try:
            kept, taken = await asyncio.to_thread(self._renew, ids)
        except Exception as exc:  # noqa: BLE001 - a busy store is tried again at the next tick
            self.failures += 1
            log.warning("renewing %d leases failed (tried again in %.0f s): %s", len(ids), self.interval, exc)
            return
        self._settle(ids, kept, taken)

    @property
    def interval(self) -> float:
        """Seconds between renewals: a quarter of the lease, so three in a row may fail first."""
        return max(0.5, self.lease_seconds / 4)

    @contextlib.asynccontextmanager
    async def kept(self) -> AsyncIterator[Leases]:
        """Renew on a timer while the block runs."""

        async def keep() -> None:
            while True:
                await asyncio.sleep(self.interval)
                await self.renew()

        task = asyncio.create_task(keep())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
