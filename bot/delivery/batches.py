"""Delivery stage: a claimed batch made into messages by the mail stage's ``Mailer``, in
a thread or (``digest.build_processes``) in build processes, so that building the next
batch overlaps sending this one.  Records what cannot be sent before it is built: a
digest whose subscriber left is cancelled (its entries given back), one whose message
cannot be built is failed.  Never sends.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import DeliverReport, DigestKind, DigestState, SubscriberStatus
from bot.mail.mailer import BuiltMessage, Mailer
from bot.mail.parts import Parts
from bot.store.answers import Finished, finish_many
from bot.store.digests import DigestRow, get_digests
from bot.store.engine import transaction
from bot.store.ledger import release_entries
from bot.store.subscribers import subscriber_statuses
from bot.unsubscribes import journal_of


class Builders:
    """Builds claimed batches with one ``Mailer``; holds the build processes, if any,
    from batch to batch until ``close``."""

    def __init__(self, mailer: Mailer) -> None:
        self.mailer = mailer
        self._processes: ProcessPoolExecutor | None = None

    async def prepare(
        self, factory: sessionmaker[Session], ids: list[int], *, now: datetime, worker: str
    ) -> tuple[list[BuiltMessage], DeliverReport]:
        """``_prepare_batch`` in a thread of this process, or with
        ``digest.build_processes`` in a worker process (its own connection and
        templates), so that building the next batch overlaps sending this one on
        another core."""
        settings = self.mailer.settings
        processes = settings.digest.build_processes
        if not processes:
            # In a thread: rendering a batch is CPU work the event loop (sends, signals) must not wait for.
            report = DeliverReport()
            built = await asyncio.to_thread(
                _prepare_batch, factory, self.mailer, ids, now=now, worker=worker, report=report
            )
            return built, report
        if self._processes is None:
            self._processes = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
        url = factory.kw["bind"].url.render_as_string(hide_password=False)
        return await asyncio.get_running_loop().run_in_executor(
            self._processes, _prepare_remote, url, settings, ids, now, worker, self.mailer.run
        )

    def close(self) -> None:
        if self._processes is not None:
            self._processes.shutdown(wait=True, cancel_futures=True)
            self._processes = None


def cancel_digests(
    session: Session, rows: Sequence[tuple[DigestRow, SubscriberStatus | None]], *, worker: str, now: datetime
) -> int:
    """Cancel claimed digests whose subscriber left (status given, None: deleted) and
    give their entries back; how many were cancelled."""
    finished = [
        Finished(row.id, row.attempts, DigestState.CANCELLED, None, f"subscriber {s.value if s else 'gone'}")
        for row, s in rows
    ]
    for row, _ in rows:
        if row.kind is not DigestKind.RESEND:
            release_entries(session, row.id)
    return len(finish_many(session, finished, worker=worker, now=now))


_REMOTE: dict[str, tuple[sessionmaker[Session], Mailer]] = {}  # per build process: its store and templates


def _prepare_remote(
    url: str, settings: Settings, ids: list[int], now: datetime, worker: str, run: str
) -> tuple[list[BuiltMessage], DeliverReport]:
    """``_prepare_batch`` in a build process (``Builders.prepare``), for the sending
    Mailer's delivery run *run*."""
    if url not in _REMOTE:
        from bot.store.engine import make_engine, sessions

        database = settings.database
        _REMOTE[url] = (
            sessions(
                make_engine(url, busy_timeout_ms=database.busy_timeout_ms, sqlite_cache_mb=database.sqlite_cache_mb)
            ),
            Mailer(Parts(settings)),  # this build process's own parts
        )
    factory, mailer = _REMOTE[url]
    if mailer.run != run:
        mailer.new_run(run)
    report = DeliverReport()
    return _prepare_batch(factory, mailer, ids, now=now, worker=worker, report=report), report


def _prepare_batch(
    factory: sessionmaker[Session], mailer: Mailer, ids: list[int], *, now: datetime, worker: str, report: DeliverReport
) -> list[BuiltMessage]:
    """Messages for the claimed digests; cancels those whose subscriber left and
    fails those whose message cannot be built (recorded at once).  The store is
    read in one short transaction and messages are built after it: on SQLite
    every transaction holds the write lock, which senders need to record."""
    journal = journal_of(factory)
    journal.try_apply_pending(factory)
    with transaction(factory) as session:
        rows = get_digests(session, ids)
        statuses = subscriber_statuses(session, {row.subscriber_id for row in rows})
        for subscriber_id in journal.pending_subscribers(statuses):
            statuses[subscriber_id] = SubscriberStatus.UNSUBSCRIBED  # acknowledged, not applied yet
        live = [row for row in rows if statuses.get(row.subscriber_id) is SubscriberStatus.ACTIVE]
        gone = [
            (row, statuses.get(row.subscriber_id))
            for row in rows
            if statuses.get(row.subscriber_id) is not SubscriberStatus.ACTIVE
        ]
        report.cancelled += cancel_digests(session, gone, worker=worker, now=now)
        loaded = mailer.load(session, live)
    built = mailer.build_loaded(loaded, now, for_wire=True)
    failed = [
        Finished(b.row.id, b.row.attempts, DigestState.FAILED, None, b.error) for b in built if b.error is not None
    ]
    if failed:
        with transaction(factory) as session:
            report.failed += len(finish_many(session, failed, worker=worker, now=now))
    return [b for b in built if b.error is None]
