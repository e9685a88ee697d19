"""Delivery: a worker's leases outlive a slow relay, and a lease another worker took is
never sent on (bot.delivery.leases)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.delivery.batches import Builders
from bot.delivery.leases import Leases
from bot.delivery.loop import deliver
from bot.delivery.smtp import SmtpPool
from bot.domain import DigestState
from bot.mail.mailer import Mailer
from bot.store.engine import transaction
from bot.store.queue import Finished, claim_due, expire_leases, finish_many
from bot.store.schema import Digest
from bot.tools.sink import Fault, Sink, SinkHandler
from tests.helpers import queue_digests, settings_for


def _hurried_clock(speed: float) -> callable:  # type: ignore[valid-type]
    """The store's clock running *speed* times faster than the wall's: a lease of ten
    seconds runs out while a batch of a few slow messages is sent."""
    start, began = datetime.now(UTC), time.monotonic()
    return lambda: start + timedelta(seconds=(time.monotonic() - began) * speed)


def test_a_batch_waiting_behind_a_slow_relay_is_sent_once(factory: sessionmaker[Session], tmp_path: Path) -> None:
    # Each message takes at least 20 ms at DATA, one connection: a batch of 20 takes 0.4 s
    # of the wall, 40 s of the store's clock, four leases.  Before leases were renewed, the
    # batch built behind it was claimed again with the next one and went out twice.
    handler = SinkHandler(faults=lambda recipient, attempt: Fault(at="data", stall=0.02, reply="250 OK"))
    queue_digests(factory, 60)
    with Sink(handler) as sink:
        settings = settings_for(tmp_path, smtp_port=sink.port, smtp={"pool_size": 1}, digest={"lease_seconds": 10})
        builders = Builders(Mailer(settings))

        async def run() -> object:
            async with SmtpPool.of(settings) as pool:
                return await deliver(factory, settings, builders, pool, clock=_hurried_clock(100), batch=20)

        try:
            report = asyncio.run(run())
        finally:
            builders.close()
    copies = Counter(r.recipients[0] for r in handler.received)
    assert len(copies) == 60
    assert max(copies.values()) == 1, [r for r, n in copies.items() if n > 1][:5]
    assert report.sent == 60 and report.lost_lease == 0  # type: ignore[attr-defined]
    with factory() as session:
        states = Counter(session.scalars(select(Digest.state)))
    assert states == {DigestState.SENT.value: 60}


def test_a_lease_another_worker_took_is_lost_and_the_rest_are_kept(factory: sessionmaker[Session]) -> None:
    queue_digests(factory, 6)
    now = datetime.now(UTC)
    with transaction(factory) as session:
        ours = claim_due(session, now=now, worker="ours", lease_seconds=10, limit=6)
    leases = Leases(factory, worker="ours", lease_seconds=10, clock=lambda: now + timedelta(seconds=60))
    batch = leases.hold(ours)
    with transaction(factory) as session:
        expire_leases(session, now + timedelta(seconds=30))
        # Only three of them are taken by another worker; the other three ran out unseen.
        theirs = claim_due(session, now=now + timedelta(seconds=30), worker="theirs", lease_seconds=10, limit=3)
    asyncio.run(leases.renew())
    assert leases.lost == set(theirs)
    with factory() as session:
        mine = {
            digest_id: expires
            for digest_id, owner, expires in session.execute(
                select(Digest.id, Digest.lease_owner, Digest.lease_expires_at).where(Digest.lease_owner == "ours")
            )
        }
    assert set(mine) == set(ours) - set(theirs)
    assert all(expires == now + timedelta(seconds=70) for expires in mine.values())
    leases.release(batch)
    assert leases.held() == set()


def test_a_digest_recorded_meanwhile_is_let_go_and_claimed_again_is_held_not_lost(
    factory: sessionmaker[Session],
) -> None:
    queue_digests(factory, 3)
    now = datetime.now(UTC)
    with transaction(factory) as session:
        ours = claim_due(session, now=now, worker="ours", lease_seconds=10, limit=3)
    leases = Leases(factory, worker="ours", lease_seconds=10, clock=lambda: now)
    leases.claimed(ours)
    retried = ours[0]
    with transaction(factory) as session:  # a 451: recorded retry_wait, due again at once
        finish_many(session, [Finished(retried, DigestState.RETRY_WAIT, 451, "try later", now)], worker="ours", now=now)
    asyncio.run(leases.renew())
    assert leases.lost == set() and leases.held() == set(ours[1:])
    with transaction(factory) as session:
        again = claim_due(session, now=now, worker="ours", lease_seconds=10, limit=3)
    assert again == [retried]
    leases.claimed(again)
    asyncio.run(leases.renew())
    assert leases.lost == set() and leases.held() == set(ours)


def test_a_batch_claimed_while_a_renewal_runs_stays_held(factory: sessionmaker[Session]) -> None:
    queue_digests(factory, 4)
    now = datetime.now(UTC)
    leases = Leases(factory, worker="ours", lease_seconds=10, clock=lambda: now)
    with transaction(factory) as session:
        first = claim_due(session, now=now, worker="ours", lease_seconds=10, limit=2)
    leases.claimed(first)

    async def scenario() -> None:
        renewing = asyncio.ensure_future(leases.renew())
        await asyncio.sleep(0)  # the renewal has taken its ids and gone to its thread
        with transaction(factory) as session:
            second = claim_due(session, now=now, worker="ours", lease_seconds=10, limit=2)
        leases.claimed(second)
        await renewing

    asyncio.run(scenario())
    assert len(leases.held()) == 4 and leases.lost == set()
