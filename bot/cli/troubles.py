"""CLI: the store's troubles in one line (a full disk, a read-only file, a file that is
no database, a schema this digestbot does not know), naming the store this command
opened.  Never opens anything itself but to ask whether a path may be written."""

from __future__ import annotations

import os
from pathlib import Path

# The store this process opened (the configuration's; one per command), for error messages.
_OPENED: list[str] = []


def shown_store() -> str:
    """The store this command opened, as an error message names it: the file, or the
    URL without its password."""
    if not _OPENED:
        return "the store"
    from sqlalchemy.engine import make_url

    url = make_url(_OPENED[-1])
    return f"the store {url.database}" if url.get_backend_name() == "sqlite" else f"the store {url!r}"


def store_read_only() -> bool:
    """Whether the SQLite store this command opened, or its folder, cannot be written."""
    from sqlalchemy.engine import make_url

    url = make_url(_OPENED[-1]) if _OPENED else None
    if url is None or url.get_backend_name() != "sqlite" or not url.database:
        return False
    path = Path(url.database)
    folder = path.parent
    try:
        mounted_read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False
    return mounted_read_only or not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK))


def opened(url: str) -> None:
    """Note the store this command opens (its configuration's)."""
    _OPENED.append(url)


def store_trouble(exc: Exception) -> str | None:
    """One line for an error of the store or its journal that reached the command line
    (a full disk, a read-only file, a file that is no database...); None for any other.
    Whatever the command had begun is rolled back by the store's transactions."""
    from bot.store.store_errors import StoreError, meaning

    if isinstance(exc, StoreError):
        return str(exc)
    if type(exc).__module__.startswith("sqlalchemy") and hasattr(exc, "orig"):
        said = meaning(exc, shown_store(), read_only=store_read_only())
        return said or f"{shown_store()}: {' '.join(str(exc.orig).split())[:200]}"
    return None


# What each optional extra brings, by the top-level module a command would fail to import.
_EXTRAS = {
    "psycopg": ("postgres", "a PostgreSQL store"),
    "numpy": ("taste", "ranking by a reader's library and feedback"),
    "scipy": ("taste", "ranking by a reader's library and feedback"),
    "sklearn": ("taste", "ranking by a reader's library and feedback"),
}


def missing_extra(exc: BaseException) -> str | None:
    """One line for a command that needs an extra which is not installed (a PostgreSQL
    URL without ``psycopg``): which, and the ``pip install`` that brings it; None for
    any other error."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    known = _EXTRAS.get(exc.name.partition(".")[0])
    if known is None:
        return None
    extra, what = known
    return f"{what} needs the {extra} extra, which is not installed: pip install 'digestbot[{extra}]'"
