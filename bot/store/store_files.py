"""Store, the names of a SQLite store's files: the database, its WAL and shared memory
(part of the store: never left behind for another), the rollback journal SQLite may
leave, and the lock files beside it (who holds the store; the roles that admit one
process).  Names only, spelled here once; never opens, locks or removes a file.
"""

from __future__ import annotations

from pathlib import Path

# The roles a SQLite store admits one process in (``bot.run.roles``).
ROLES = ("scheduler", "worker")


def wal_file(store: Path) -> Path:
    """Where *store*'s committed pages wait for a checkpoint."""
    return Path(f"{store}-wal")


def database_files(store: Path) -> list[Path]:
    """The store and the files SQLite keeps its committed pages in: moved, copied and
    removed together."""
    return [store, wal_file(store), Path(f"{store}-shm")]


def sqlite_files(store: Path) -> list[Path]:
    """Every file SQLite may make for *store*: ``database_files`` and a rollback journal."""
    return [*database_files(store), Path(f"{store}-journal")]


def holders_lock(store: Path) -> Path:
    """The lock file every process that opens *store* holds shared (``store_holders``)."""
    return Path(f"{store}.lock")


def role_lock(store: Path, role: str) -> Path:
    """The lock file of a role that admits one process (``ROLES``)."""
    if role not in ROLES:
        raise ValueError(f"{role} is not a role a store admits one process in")
    return Path(f"{store}.{role}.lock")


def lock_files(store: Path) -> list[Path]:
    return [holders_lock(store), *(role_lock(store, role) for role in ROLES)]
