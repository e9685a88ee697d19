"""Domain: the states of a reader's Zotero connection and of a paper they asked to save
to it (``bot.zotero.connection`` decides every change).  Pure; never I/O."""

from __future__ import annotations

from enum import StrEnum


class ConnectionState(StrEnum):
    NEW = "new"  # connected, never synced yet: the next pass syncs it
    SYNCED = "synced"  # synced; again each zotero.sync_hours
    BROKEN = "broken"  # the key was refused or the library is gone: nothing asked until reconnected


class SaveState(StrEnum):
    PENDING = "pending"  # asked; written by the next pass (tried again, longer each time)
    SAVED = "saved"  # in the reader's library (made, or found there already)
    FAILED = "failed"  # given up: not made within two days of the ask
