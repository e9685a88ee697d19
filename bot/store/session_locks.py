"""Store: locks a process holds for as long as its own connection lives (PostgreSQL's
session advisory locks), and the question whether that connection still answers.

SQL only.  Never decides who should hold a lock: ``bot.run.roles`` does.
"""

from __future__ import annotations

from sqlalchemy import Connection, text


def try_session_lock(connection: Connection, key: int) -> bool:
    """Take the advisory lock *key* for *connection*'s session, unless another session holds it."""
    got = connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}).scalar()
    connection.commit()
    return bool(got)


def still_answers(connection: Connection) -> None:
    """Raise if *connection* no longer answers (its session, and any lock it held, are gone)."""
    connection.execute(text("SELECT 1")).scalar()
    connection.commit()
