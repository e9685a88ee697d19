"""Zotero stage, the sync: each connected library brought up to date, as the API asks.

A library that has not changed costs one request (``If-Modified-Since-Version``: 304).
One that has is read from the version last synced: the changed items' versions, the
items themselves ``PAGE_SIZE`` at a time, the keys deleted since.  Items become the
reader's library papers through the identity rule a library file's records go through
(``bot.zotero.api_shapes.paper_from``), up to the library's cap, the most recently
changed first (the older items are never fetched); papers a deleted or trashed item
brought leave.  A library whose version went backwards (a server restored from a
backup) is synced again in full the next pass.

One reader's failure is theirs: a 403 or 404 breaks the connection (nothing is asked
until the reader connects again), anything else is asked again the next pass, and
neither stops another reader's sync.  Never renders, never sends mail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.domain.text import one_line
from bot.sealed import Sealer
from bot.store.engine import transaction
from bot.store.library import add_papers
from bot.store.zotero import (
    change_connection,
    connection_of,
    due_connections,
    forget_items,
    item_papers,
    put_items,
    remove_synced_papers,
)
from bot.zotero.api import Changes, ZoteroApi, ZoteroBusy, ZoteroRefused, ZoteroTrouble
from bot.zotero.api_shapes import paper_from
from bot.zotero.connection import BROKEN, NEW, SYNCED, mark_broken

log = logging.getLogger(__name__)

# A sync that failed (a timeout, a 5xx, a wrong answer) is asked again after this long, not
# every minute: a Zotero that is down is not asked by every reader at each of the daemon's ticks.
AGAIN_AFTER = timedelta(minutes=15)
UNSEALED = "this site's secrets key is not the one the key was sealed with: connect the library again"


@dataclass(frozen=True, slots=True)
class Synced:
    """One reader's sync: what changed in their library here, or why nothing did."""

    subscriber_id: int
    added: int = 0
    removed: int = 0
    unchanged: bool = False
    problem: str | None = None  # asked again next pass
    broken: str | None = None  # nothing asked until the reader connects again
    skipped: bool = False  # the server asked every client to wait: not asked this pass

    def said(self) -> str:
        if self.broken:
            return f"connection broken: {self.broken}"
        if self.skipped:
            return f"not synced: {self.problem}"
        if self.problem:
            return f"not synced: {self.problem} (asked again next pass)"
        if self.unchanged:
            return "unchanged"
        return f"{self.added} papers added, {self.removed} removed"


def sync_due(
    factory: sessionmaker[Session],
    api: ZoteroApi,
    sealer: Sealer,
    now: datetime,
    *,
    every: timedelta,
    most: int,
    only: Sequence[int] | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> list[Synced]:
    """Sync every library due (never synced, or not for *every*), or those of *only*
    whatever their last sync (but a broken one), ``in_flight`` at once; once
    *keep_going* says no (a stop), the readers not begun are left for the next pass."""
    with factory() as session:
        if only is None:
            due = due_connections(session, (NEW, SYNCED), now - every, now - AGAIN_AFTER)
        else:
            due = [sid for sid in only if (row := connection_of(session, sid)) is not None and row.state != BROKEN]
    if not due:
        return []
    busy: list[str] = []

    def one(subscriber_id: int) -> Synced:
        if not keep_going():
            return Synced(subscriber_id, problem="stopping", skipped=True)
        if busy:
            return Synced(subscriber_id, problem=busy[0], skipped=True)
        try:
            return sync_one(factory, api, sealer, subscriber_id, now, most=most)
        except ZoteroBusy as error:
            busy.append(str(error))
            return Synced(subscriber_id, problem=str(error), skipped=True)
        except Exception as error:  # noqa: BLE001 - one reader's library never stops another's
            log.exception("zotero: reader %d: the sync failed", subscriber_id)
            return Synced(subscriber_id, problem=f"{type(error).__name__}: {one_line(str(error))[:200]}")

    with ThreadPoolExecutor(max_workers=api.config.in_flight, thread_name_prefix="zotero") as pool:
        return list(pool.map(one, due))


def sync_one(
    factory: sessionmaker[Session], api: ZoteroApi, sealer: Sealer, subscriber_id: int, now: datetime, *, most: int
) -> Synced:
    """Bring one reader's library up to date (``ZoteroBusy`` when the server asks
    every client to wait: the caller stops the pass)."""
    with factory() as session:
        row = connection_of(session, subscriber_id)
        if row is None or row.state == BROKEN:
            return Synced(subscriber_id, broken=row.problem if row else "not connected")
        library, sealed, since, collections = row.library, row.sealed_key, row.version, frozenset(row.collections)
    key = sealer.open(sealed)
    if key is None:
        mark_broken(factory, subscriber_id, UNSEALED)
        return Synced(subscriber_id, broken=UNSEALED)
    try:
        changes = api.changes(
            library, key, since, wanted=lambda item: paper_from(item, collections) is not None, most=most
        )
        known = api.collections(library, key) if changes is not None else None
    except ZoteroRefused as refused:
        mark_broken(factory, subscriber_id, str(refused))
        return Synced(subscriber_id, broken=str(refused))
    except ZoteroBusy:
        raise
    except ZoteroTrouble as trouble:
        with transaction(factory) as session:
            change_connection(session, subscriber_id, problem=str(trouble), tried_at=now)
        return Synced(subscriber_id, problem=str(trouble))
    if changes is None:
        with transaction(factory) as session:
            change_connection(session, subscriber_id, synced_at=now, tried_at=now, state=SYNCED, problem=None)
        return Synced(subscriber_id, unchanged=True)
    if changes.version < since:
        problem = f"the library's version went back from {since} to {changes.version}: synced in full next pass"
        with transaction(factory) as session:
            change_connection(session, subscriber_id, version=0, problem=problem, tried_at=now)
        return Synced(subscriber_id, problem=problem)
    return _apply(factory, subscriber_id, changes, collections, known or [], since, now, most)


def _apply(
    factory: sessionmaker[Session],
    subscriber_id: int,
    changes: Changes,
    collections: frozenset[str],
    known: list[tuple[str, str]],
    since: int,
    now: datetime,
    most: int,
) -> Synced:
    papers = [(item, paper_from(item, collections)) for item in changes.items]
    with transaction(factory) as session:
        listed = {item.key for item in changes.items}
        # From the start every item is listed and one not listed is gone: all are read; else
        # only those the changes name (a sync of ten changes reads ten, not the library).
        asked = None if since == 0 else sorted(listed | set(changes.deleted))
        before = item_papers(session, subscriber_id, asked)
        # A sync from the start lists every item: one it does not list is gone.
        gone = set(changes.deleted) | (set(before) - changes.listed if since == 0 else set())
        put_items(session, subscriber_id, [(item.key, item.version, p.key if p else None) for item, p in papers])
        forget_items(session, subscriber_id, sorted(gone))
        was = {paper for k in listed | gone if k in before and (paper := before[k][1])}
        removed = remove_synced_papers(session, subscriber_id, was)
        new = [p for _, p in papers if p is not None]
        added, _ = add_papers(session, subscriber_id, list({p.key: p for p in new}.values()), now, most=most)
        change_connection(
            session,
            subscriber_id,
            version=changes.version,
            synced_at=now,
            tried_at=now,
            state=SYNCED,
            problem=None,
            known_collections=[[k, n] for k, n in known],
        )
    return Synced(subscriber_id, added=len(added), removed=removed)
