"""Zotero stage, the pass the daemon runs every minute: the "Save to Zotero" asks taken
from the journal, the saves that are due written, and the libraries that are due synced
(each ``zotero.sync_hours``, and at once after its reader connects).  A deployment where
nobody connected a library costs two look-ups and opens no connection to anyone.
Never renders, never sends mail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import exists, select
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.sealed import sealer_of
from bot.store.engine import transaction
from bot.store.zotero import tell_broken
from bot.store.zotero_tables import ZoteroConnectionRow
from bot.unsubscribes import journal_of
from bot.zotero.api import ZoteroApi
from bot.zotero.library_sync import Synced, sync_due
from bot.zotero.saves import Written, take_asks, write_saves

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ZoteroPass:
    asks: int = 0
    written: Written = field(default_factory=Written)
    synced: tuple[Synced, ...] = ()
    requests: int = 0


def zotero_pass(
    factory: sessionmaker[Session],
    settings: Settings,
    now: datetime,
    *,
    only: Sequence[int] | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> ZoteroPass:
    """One pass (see the module); *only*: sync these readers' libraries now, whenever
    they were synced last (``library sync``)."""
    journal = journal_of(factory)
    asks = take_asks(journal, factory, now, settings.digest.search_url)
    with factory() as session:
        if not session.scalar(select(exists().where(ZoteroConnectionRow.subscriber_id.is_not(None)))):
            return ZoteroPass(asks)
    sealer = sealer_of(settings)
    with ZoteroApi(settings.zotero) as api:
        written = write_saves(factory, api, sealer, now, settings.digest.search_url)
        synced: list[Synced] = []
        if keep_going():
            synced = sync_due(
                factory,
                api,
                sealer,
                now,
                every=timedelta(hours=settings.zotero.sync_hours),
                most=settings.subscribers.library_max_papers,
                only=only,
                keep_going=keep_going,
            )
    with transaction(factory) as session:
        tell_broken(session)  # after the sync: a connection it broke is told by the next digest
    return ZoteroPass(asks, written, tuple(synced), api.counts.requests)
