"""Zotero stage, the connection: a reader connects a library with an API key, which is
checked once and sealed before it is stored; disconnects; and what the manage page and
the commands say of it.  The states are decided here and nowhere else.

Composes ``bot.zotero.api`` (the one request a connect makes), ``bot.sealed`` and
``bot.store.zotero``.  Never logs or returns a key; never renders.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.domain.zotero_states import ConnectionState, SaveState
from bot.sealed import Sealer
from bot.store.engine import transaction
from bot.store.zotero import change_connection, connection_of, drop_connection, put_connection
from bot.zotero.api import ZoteroApi, ZoteroRefused, ZoteroTrouble
from bot.zotero.api_shapes import what_it_can

NEW, SYNCED, BROKEN = ConnectionState.NEW, ConnectionState.SYNCED, ConnectionState.BROKEN
PENDING, SAVED, FAILED = SaveState.PENDING, SaveState.SAVED, SaveState.FAILED
# A key as Zotero makes them: 24 letters and digits.  Anything else is refused before a
# request carries it anywhere.
log = logging.getLogger(__name__)
KEY_SHAPE = re.compile(r"[A-Za-z0-9]{16,64}")


class ConnectError(Exception):
    """The library cannot be connected (one line for the reader)."""


@dataclass(frozen=True, slots=True)
class ZoteroShown:
    """What a page or ``subscribers show`` says of a reader's connection."""

    library: str  # "your library" or "group 123"
    state: str
    can_write: bool
    problem: str | None
    synced_at: datetime | None
    collections: tuple[str, ...]  # the chosen collections' keys ((): all)
    known_collections: tuple[tuple[str, str], ...]
    save_into: str | None

    @property
    def can(self) -> str:
        return what_it_can(self.can_write)

    @property
    def broken(self) -> bool:
        return self.state == BROKEN

    @property
    def saves(self) -> bool:
        """The reader gets "Save to Zotero" links."""
        return self.can_write and self.state != BROKEN


def library_words(library: str) -> str:
    kind, _, number = library.partition("/")
    return "your library" if kind == "users" else f"group {number}"


def connect(
    factory: sessionmaker[Session],
    api: ZoteroApi,
    sealer: Sealer,
    subscriber_id: int,
    library_choice: str,
    key: str,
    now: datetime,
) -> ZoteroShown:
    """Check *key* with Zotero, then keep the connection (its key sealed); what it can
    do.  ``ConnectError`` (one line) when the key or the library will not do."""
    key = key.strip()
    if not KEY_SHAPE.fullmatch(key):
        raise ConnectError("that is not a Zotero API key (24 letters and digits, made at zotero.org/settings/keys)")
    try:
        access = api.key_access(key)
    except ZoteroRefused:
        raise ConnectError("Zotero does not know that key (was it deleted?)") from None
    except ZoteroTrouble as trouble:
        raise ConnectError(f"Zotero could not be asked about the key: {trouble}; try again later") from None
    try:
        library = access.library(library_choice)
    except ValueError as error:
        raise ConnectError(str(error)) from None
    if not access.can_read(library):
        raise ConnectError(f"that key may not read {library_words(library)}")
    values: dict[str, object] = {
        "library": library,
        "sealed_key": sealer.seal(key),
        "can_write": access.can_write(library),
        "collections": [],
        "save_into": None,
        "known_collections": [],
        "version": 0,
        "state": NEW,
        "problem": None,
        "connected_at": now,
        "synced_at": None,
        "tried_at": None,
        "told_digest_id": None,
    }
    with transaction(factory) as session:
        put_connection(session, subscriber_id, values)
    found = shown(factory, subscriber_id)
    assert found is not None
    return found


def disconnect(factory: sessionmaker[Session], subscriber_id: int) -> bool:
    """Forget the connection and its key; whether there was one."""
    with transaction(factory) as session:
        return drop_connection(session, subscriber_id)


def choose_collections(
    factory: sessionmaker[Session], subscriber_id: int, chosen: list[str], save_into: str | None
) -> None:
    """Which collections count (none chosen: all) and which one saved papers go into;
    only collections the last sync saw.  A change of what counts syncs the library
    again from the start."""
    with transaction(factory) as session:
        row = connection_of(session, subscriber_id)
        if row is None:
            return
        known = {key for key, _ in row.known_collections}
        picked = sorted({key for key in chosen if key in known})
        into = save_into if save_into in known else None
        values: dict[str, object] = {"save_into": into}
        if picked != sorted(row.collections):
            values.update(collections=picked, version=0, synced_at=None, tried_at=None)
        change_connection(session, subscriber_id, **values)


def shown(factory: sessionmaker[Session], subscriber_id: int) -> ZoteroShown | None:
    with factory() as session:
        return shown_in(session, subscriber_id)


def shown_in(session: Session, subscriber_id: int) -> ZoteroShown | None:
    row = connection_of(session, subscriber_id)
    if row is None:
        return None
    known = tuple((str(k), str(n)) for k, n in row.known_collections if isinstance(k, str))
    return ZoteroShown(
        library_words(row.library),
        row.state,
        row.can_write,
        row.problem,
        row.synced_at,
        tuple(row.collections),
        known,
        row.save_into,
    )


def mark_broken(factory: sessionmaker[Session], subscriber_id: int, problem: str) -> None:
    """The key was refused or the library is gone: nothing is asked of Zotero for this
    reader until they connect again, and their next digest says so once."""
    with transaction(factory) as session:
        change_connection(session, subscriber_id, state=BROKEN, problem=problem, told_digest_id=None)
    log.info("zotero: reader %d: connection broken (%s)", subscriber_id, problem)
