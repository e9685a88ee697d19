"""Opening databases and migrating them.

SQLite gets WAL, a busy timeout and foreign keys on every connection, and the
writers of one process take turns for its one write lock (``transaction``); schema
changes only ever go through Alembic (``digestbot db upgrade``; automatic for
SQLite at start-up, where nobody else could run it).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

# How long a writer waits for the others of its process before it asks SQLite itself
# (and its busy timeout): a writer that holds the lock longer is stuck, not busy.
TURN_SECONDS = 30.0
# The turn lock of each SQLite engine that writes: SQLite's busy handler retries after
# growing sleeps, unfairly, so among many threads one can time out while the lock sits
# idle between turns; threads that queue here wake as soon as the one before is done.
_TURNS: weakref.WeakKeyDictionary[Engine, threading.RLock] = weakref.WeakKeyDictionary()

# Alembic is imported inside the functions below: importing it is a large part of
# the CLI's start-up, and most commands never migrate.
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def make_engine(
    url: str,
    *,
    busy_timeout_ms: int = 5000,
    sqlite_cache_mb: int = 64,
    durable: bool = False,
    read_only: bool = False,
) -> Engine:
    """An engine for *url*; on SQLite, WAL and our pragmas (*durable*: every commit is
    synced to disk, not only checkpoints: for the unsubscribe journal; *read_only*:
    transactions begin deferred and may not write, so they never wait for the writer)."""
    parsed = make_url(url)
    # An error's message never carries its statement's parameters: they are rows
    # (addresses, names, whole summaries), and a message is printed and logged.
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, hide_parameters=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    # Readers serve the endpoint's thread pool (40 threads): enough pooled connections
    # that none is opened and closed per request under a burst.
    pool = {"pool_size": 40, "max_overflow": 10} if read_only else {}
    engine = create_engine(url, connect_args={"timeout": busy_timeout_ms / 1000}, hide_parameters=True, **pool)

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's own BEGIN handling defers locks; we issue BEGIN ourselves
        # (below) so a writer takes the lock up front instead of failing later.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        if not read_only:  # WAL is a property of the file, set by its writers
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        # SQLite's small default page cache makes index inserts into a large
        # store go to the OS for every page; database.sqlite_cache_mb keeps the
        # hot index levels.  It is per connection and counts in the process's memory.
        cursor.execute(f"PRAGMA cache_size=-{int(sqlite_cache_mb) * 1024}")
        cursor.execute("PRAGMA temp_store=MEMORY")
        if read_only:
            cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _sqlite_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    if not read_only:
        _TURNS[engine] = threading.RLock()
    return engine


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


# Rows ANALYZE looks at per index: statistics close enough to choose a plan, in
# milliseconds whatever the store's size (SQLite's own advice for analysis_limit).
ANALYSIS_LIMIT = 1000


def refresh_statistics(engine: Engine) -> None:
    """Give SQLite's query planner the statistics it plans by (``sqlite_stat1``):
    without them it guesses, and once chose to start a query from every digest ever
    sent.  PostgreSQL keeps its own (autovacuum's ANALYZE): nothing to do there."""
    if not is_sqlite(engine):
        return
    with engine.connect() as conn:
        conn.exec_driver_sql(f"PRAGMA analysis_limit={ANALYSIS_LIMIT}")
        conn.exec_driver_sql("ANALYZE")
        conn.commit()


def _alembic_config(engine: Engine) -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(_alembic_config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    command.downgrade(_alembic_config(engine), revision)


def _newest_migration() -> str:
    """The newest revision by the scripts' names (``NNNN_what.py`` holds revision
    ``NNNN``): every CLI command compares the database with it, and asking Alembic would
    import it (see above).  A test keeps it equal to what Alembic finds."""
    names = (path.name for path in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    return max(name[:4] for name in names)


HEAD_REVISION = _newest_migration()


def current_revision(engine: Engine) -> str | None:
    """The database's schema revision, None when it was never migrated (read without Alembic)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()


def head_revision() -> str | None:
    """The newest revision among the migration scripts, as Alembic reads them."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def revisions() -> list[str]:
    """Every revision of the migration scripts, oldest first, in Alembic's graph."""
    from alembic.script import ScriptDirectory

    return [script.revision for script in reversed(list(ScriptDirectory(str(MIGRATIONS)).walk_revisions()))]


def sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back everything on any error.  On
    SQLite, after the transactions of other threads of this process that came first."""
    turn = _TURNS.get(factory.kw["bind"])
    taken = turn is not None and turn.acquire(timeout=TURN_SECONDS)
    try:
        with factory() as session, session.begin():
            yield session
    finally:
        if taken:
            turn.release()  # type: ignore[union-attr]
