"""Zotero stage, the saves: "Save to Zotero" asks taken from the journal, and the items
written to the readers' libraries.

A page journals the ask (``Journal.append_saves``) and answers at once.  ``take_asks``
then turns each into a save of its own (one per reader and entry, with the write token
every attempt will send), a "more like this" and a library paper, so the reader's
ranking learns it before Zotero has heard of it.  ``write_saves`` writes them: first a
look-up for the same DOI, arXiv id or address (an item the reader has already is not
made again), then the item, with the save's ``Zotero-Write-Token``: an attempt whose
answer was lost is made again with the same token, and Zotero answers 412 if the first
one took.  A refused key breaks the connection and the save waits for the reader to
connect again; anything else waits and is tried again, longer each time.
Never renders; never logs a key.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.domain import EntryContent
from bot.domain.links import primary_url
from bot.mail.prose import plain_summary, title_text
from bot.sealed import Sealer
from bot.store.engine import transaction
from bot.store.entry_content import content_of
from bot.store.feedback import set_feedback
from bot.store.library import add_papers
from bot.store.schema import Entry
from bot.store.zotero import ask_save, change_save, connection_of, pending_saves, save_of
from bot.taste.library import paper_of
from bot.unsubscribes import Journal
from bot.zotero.api import WriteTokenUsed, ZoteroApi, ZoteroBusy, ZoteroRefused, ZoteroTrouble
from bot.zotero.api_shapes import new_item, same_paper
from bot.zotero.connection import BROKEN, FAILED, PENDING, SAVED, mark_broken
from bot.zotero.library_sync import UNSEALED

log = logging.getLogger(__name__)

# A save not made within this long after it was asked is given up (said on the page).
GIVE_UP = timedelta(days=2)
LONGEST_PAUSE = timedelta(hours=1)


def take_asks(journal: Journal, factory: sessionmaker[Session], now: datetime, search_url: str) -> int:
    """Every journaled ask made a save (once: a second ask of the same entry is the
    first one); how many asks there were."""
    asks = journal.pending_saves()
    if not asks:
        return 0
    with transaction(factory) as session:
        for _, subscriber_id, entry_id in asks:
            _take(session, subscriber_id, entry_id, now, search_url)
    journal.mark_saves_applied([rid for rid, _, _ in asks])
    return len(asks)


def _take(session: Session, subscriber_id: int, entry_id: int, now: datetime, search_url: str) -> None:
    connection = connection_of(session, subscriber_id)
    entry = session.get(Entry, entry_id)
    if connection is None or not connection.can_write or entry is None:
        return  # disconnected (or the entry pruned) since: nothing to save into
    if not ask_save(session, subscriber_id, entry_id, uuid.uuid4().hex, now):
        return
    set_feedback(session, subscriber_id, entry_id, "more", now)
    content = content_of(entry)
    ids = [i for i in (content.arxiv_id and f"arXiv:{content.arxiv_id}", content.doi and f"doi:{content.doi}") if i]
    paper = paper_of(title_text(content.title), plain_summary(content), ids, "zotero")
    if paper is not None:
        add_papers(session, subscriber_id, [paper], now)


@dataclass(frozen=True, slots=True)
class Written:
    saved: int = 0
    found: int = 0  # already in the library: not made again
    waiting: int = 0  # asked again later
    given_up: int = 0


def write_saves(
    factory: sessionmaker[Session], api: ZoteroApi, sealer: Sealer, now: datetime, search_url: str
) -> Written:
    """Write the saves that are due; what became of them."""
    with factory() as session:
        due = [(s.subscriber_id, s.entry_id) for s in pending_saves(session) if _due(s.attempts, s.tried_at, now)]
    counts = {"saved": 0, "found": 0, "waiting": 0, "given_up": 0}
    broken: set[int] = set()
    for subscriber_id, entry_id in due:
        if subscriber_id in broken:
            continue
        try:
            outcome = _write(factory, api, sealer, subscriber_id, entry_id, now, search_url)
        except ZoteroBusy:
            counts["waiting"] += 1
            break
        if outcome == BROKEN:
            broken.add(subscriber_id)
        counts[outcome if outcome in counts else "waiting"] += 1
    return Written(**counts)


def _due(attempts: int, tried_at: datetime | None, now: datetime) -> bool:
    if tried_at is None:
        return True
    return now >= tried_at + min(LONGEST_PAUSE, timedelta(minutes=2 ** min(attempts, 10)))


@dataclass(frozen=True, slots=True)
class _SaveAttempt:
    """What one save's attempt needs, read from the store."""

    library: str
    sealed: str
    into: str | None
    token: str
    attempts: int
    asked_at: datetime
    content: EntryContent


def _asked(factory: sessionmaker[Session], subscriber_id: int, entry_id: int) -> _SaveAttempt | str:
    """The save's attempt, or what became of it instead ("gone", ``BROKEN``)."""
    with factory() as session:
        connection, save = connection_of(session, subscriber_id), save_of(session, subscriber_id, entry_id)
        entry = session.get(Entry, entry_id)
        if connection is None or save is None or entry is None or save.state != PENDING:
            return "gone"
        if connection.state == BROKEN:
            return BROKEN
        return _SaveAttempt(
            connection.library,
            connection.sealed_key,
            connection.save_into,
            save.write_token,
            save.attempts,
            save.asked_at,
            content_of(entry),
        )


def _write(
    factory: sessionmaker[Session],
    api: ZoteroApi,
    sealer: Sealer,
    subscriber_id: int,
    entry_id: int,
    now: datetime,
    search_url: str,
) -> str:
    asked = _asked(factory, subscriber_id, entry_id)
    if isinstance(asked, str):
        return asked
    key = sealer.open(asked.sealed)
    if key is None:
        mark_broken(factory, subscriber_id, UNSEALED)
        return BROKEN
    try:
        outcome, made = _made(api, key, asked, search_url)
    except ZoteroRefused as refused:
        mark_broken(factory, subscriber_id, str(refused))
        with transaction(factory) as session:
            change_save(session, subscriber_id, entry_id, problem=str(refused))
        return BROKEN
    except ZoteroBusy:
        raise
    except ZoteroTrouble as trouble:
        return _waits(factory, subscriber_id, entry_id, now, asked, str(trouble))
    _done(factory, subscriber_id, entry_id, now, made, asked.attempts)
    return outcome


def _made(api: ZoteroApi, key: str, asked: _SaveAttempt, search_url: str) -> tuple[str, str | None]:
    """("found", its key) when the library holds the paper already, else ("saved", the
    key of the item made, None when an earlier attempt with the token made it)."""
    content = asked.content
    url = primary_url(content, search_url)
    words = content.doi or (content.arxiv_id and f"arxiv.org/abs/{content.arxiv_id}") or url
    existing = same_paper(api.find(asked.library, key, words), content.doi, content.arxiv_id) if words else None
    if existing is not None:
        return "found", existing
    item = new_item(content, title_text(content.title), plain_summary(content), url, asked.into)
    try:
        return "saved", api.create(asked.library, key, item, asked.token)
    except WriteTokenUsed:
        return "saved", None  # an earlier attempt made it: its answer was lost


def _waits(
    factory: sessionmaker[Session], subscriber_id: int, entry_id: int, now: datetime, asked: _SaveAttempt, problem: str
) -> str:
    """A save Zotero did not take: tried again later, or given up two days after it was asked."""
    given_up = now - asked.asked_at > GIVE_UP
    with transaction(factory) as session:
        change_save(
            session,
            subscriber_id,
            entry_id,
            attempts=asked.attempts + 1,
            tried_at=now,
            problem=problem,
            state=FAILED if given_up else PENDING,
            done_at=now if given_up else None,
        )
    log.info("zotero: reader %d: a save waits (%s)", subscriber_id, problem)
    return "given_up" if given_up else "waiting"


def _done(
    factory: sessionmaker[Session], subscriber_id: int, entry_id: int, now: datetime, made: str | None, attempts: int
) -> None:
    with transaction(factory) as session:
        change_save(
            session,
            subscriber_id,
            entry_id,
            state=SAVED,
            item_key=made,
            attempts=attempts + 1,
            tried_at=now,
            done_at=now,
            problem=None,
        )
