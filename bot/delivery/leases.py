"""Delivery stage: the leases a worker holds on the digests it has claimed, kept alive
while they are built and sent, and given back when it stops.

A claimed batch waits while the one before it is on the wire, and a relay that takes
0.5 messages a second sends 200 in 400 s: longer than any lease.  A lease that runs out
makes its digests due again, and whoever claims them (another worker, or this one for its
next batch) sends them.  So every lease this worker holds is renewed on a timer (a
quarter of the lease) and before each claim (so that this worker never claims its own
waiting digests).  Renewing is not what keeps a message from going out twice, though: a
worker paused longer than its lease (SIGSTOP, a suspended machine, a blocked loop) learns
only afterwards that it lost it.  What does is the mark each message gets in the store,
in a transaction of its own that checks the claim, just before it goes on the wire
(``bot.delivery.outcomes``; ``queue.put_on_wire``).  Never sends, never builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.store.engine import transaction
from bot.store.queue import Claim, give_back, renew_leases
from bot.store.store_errors import said

log = logging.getLogger(__name__)

TAKEN = "are no longer this worker's"  # the words operators (and bench/chaos.py) find it by


class Leases:
    """The claims (digest id -> attempt) of each batch this worker holds, from its claim
    until each is recorded, given back or found another's."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        worker: str,
        lease_seconds: int,
        clock: Callable[[], datetime],
    ) -> None:
        self.factory, self.worker, self.lease_seconds, self.clock = factory, worker, lease_seconds, clock
        self._batches: dict[int, dict[int, int]] = {}
        self._next_batch = 0
        self.lost: set[int] = set()  # another worker's now, or recorded: never to be sent by this one
        self.failures = 0  # renewals that failed (the store busy or gone): logged, tried again
        self.not_given_back: dict[int, int] = {}  # claims the store refused to take back: tried again later

    def hold(self, claims: Sequence[Claim]) -> int:
        """Hold a newly claimed batch (a digest it lost before and claimed again, after
        a retry, is its own again); its key, for ``release``."""
        self.lost -= {claim.digest_id for claim in claims}
        self._next_batch += 1
        self._batches[self._next_batch] = {claim.digest_id: claim.attempt for claim in claims}
        return self._next_batch

    def release(self, batch: int) -> None:
        self._batches.pop(batch, None)

    def claims_of(self, batch: int) -> dict[int, int]:
        """The claims of *batch* still held: digest id -> attempt."""
        return dict(self._batches.get(batch, {}))

    def let_go(self, digest_ids: Iterable[int]) -> None:
        """These were recorded by this worker: held no longer."""
        done = set(digest_ids)
        if done:
            for claims in self._batches.values():
                for digest_id in done & claims.keys():
                    del claims[digest_id]

    def held(self) -> dict[int, int]:
        """Every claim held: digest id -> attempt."""
        return {digest_id: attempt for claims in self._batches.values() for digest_id, attempt in claims.items()}

    def renew_in(self, session: Session) -> None:
        """Renew every held lease in *session*'s transaction (before a claim, in its own)."""
        ids = set(self.held())
        if ids:
            self._settle(ids, self._renewed(session, ids))

    def _renewed(self, session: Session, ids: set[int]) -> tuple[set[int], set[int]]:
        return renew_leases(
            session, sorted(ids), worker=self.worker, now=self.clock(), lease_seconds=self.lease_seconds
        )

    def _renew(self, ids: set[int]) -> tuple[set[int], set[int]]:
        with transaction(self.factory) as session:
            return self._renewed(session, ids)

    def _settle(self, asked: set[int], found: tuple[set[int], set[int]]) -> None:
        """What a renewal of *asked* found: those not kept and still held here are never to
        be sent by this worker: taken by another (this one's lease had run out), or
        recorded (by the build, or by another worker that took them first), or settled
        unknown.  A batch claimed while the renewal ran is not among *asked*, and stays
        held."""
        kept, taken = found
        gone = (asked - kept) & set(self.held())
        if (taken & gone) - self.lost:
            log.warning(
                "%d digests %s: its lease ran out and another worker took them; it will not send them",
                len((taken & gone) - self.lost),
                TAKEN,
            )
        self.lost |= gone
        for claims in self._batches.values():
            for digest_id in gone & claims.keys():
                del claims[digest_id]

    async def renew(self) -> None:
        """Renew every held lease, off the event loop."""
        ids = set(self.held())
        if not ids:
            return
        try:
            found = await asyncio.to_thread(self._renew, ids)
        except Exception as exc:  # noqa: BLE001 - a busy store is tried again at the next tick
            self.failures += 1
            log.warning("renewing %d leases failed (tried again in %.0f s): %s", len(ids), self.interval, said(exc))
            return
        self._settle(ids, found)

    async def give_back(self, claims: dict[int, int]) -> int:
        """Give back claims never put on the wire (a stop, a store that refused writes): due
        again at once; how many.  A store that refuses this too leaves them to their
        leases running out (they never went on the wire: whoever claims them next sends)."""
        if not claims:
            return 0
        pairs = sorted(claims.items())

        def back() -> set[int]:
            with transaction(self.factory) as session:
                return give_back(session, pairs, worker=self.worker)

        try:
            returned = await asyncio.to_thread(back)
        except Exception as exc:  # noqa: BLE001 - tried again at the next delivery, else their leases run out
            log.warning("%d claimed digests not given back yet (%s)", len(pairs), said(exc))
            self.not_given_back.update(pairs)
            return 0
        self.let_go(returned)
        return len(returned)

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
