"""Where a benchmark keeps its stores, and how it copies one for each timed pass: a
SQLite file copied as a file, or a PostgreSQL database copied as a template
(``CREATE DATABASE ... TEMPLATE``), both much faster than building the store again."""

from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


class Place:
    """Stores named *name* in a folder (SQLite) or beside the database of *url* (PostgreSQL)."""

    def __init__(self, folder: Path, url: str = "") -> None:
        self.folder, self.server = folder, make_url(url) if url else None
        self.made: list[str] = []

    @property
    def postgres(self) -> bool:
        return self.server is not None

    def url(self, name: str) -> str:
        if self.server is None:
            return f"sqlite:///{self.folder / f'{name}.sqlite3'}"
        return self.server.set(database=f"digestbot_bench_{name}").render_as_string(hide_password=False)

    def create(self, name: str) -> str:
        """A new, empty store *name* (one left from an earlier run is dropped); its URL."""
        if self.server is not None:
            self._admin(
                f'DROP DATABASE IF EXISTS "digestbot_bench_{name}"', f'CREATE DATABASE "digestbot_bench_{name}"'
            )
            self.made.append(name)
        return self.url(name)

    def copy(self, name: str, to: str) -> str:
        """A copy of store *name* (no connection to it open) as *to*; its URL."""
        if self.server is None:
            original = self.folder / f"{name}.sqlite3"
            with closing(sqlite3.connect(original)) as connection:  # the whole store in the one file copied
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            shutil.copyfile(original, self.folder / f"{to}.sqlite3")
            os.sync()  # the copy's writeback is not left to compete with the pass
            return self.url(to)
        self._admin(
            f'DROP DATABASE IF EXISTS "digestbot_bench_{to}"',
            f'CREATE DATABASE "digestbot_bench_{to}" TEMPLATE "digestbot_bench_{name}"',
        )
        self.made.append(to)
        return self.url(to)

    def settle(self, name: str) -> None:
        """What autovacuum does to a store over the days it was written in minutes: on
        PostgreSQL, VACUUM ANALYZE (the readers' rows rewritten every day leave dead
        versions that each read would step over); nothing on SQLite."""
        if self.server is None:
            return
        engine = create_engine(self.url(name), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text("VACUUM ANALYZE"))
        finally:
            engine.dispose()

    def drop(self, name: str) -> None:
        if self.server is None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.folder / name}.sqlite3{suffix}").unlink(missing_ok=True)
            return
        self._admin(f'DROP DATABASE IF EXISTS "digestbot_bench_{name}" WITH (FORCE)')

    def close(self) -> None:
        """Drop every PostgreSQL database this place made."""
        for name in self.made:
            self.drop(name)

    def _admin(self, *statements: str) -> None:
        assert self.server is not None
        admin = create_engine(self.server, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as connection:
                for statement in statements:
                    connection.execute(text(statement))
        finally:
            admin.dispose()
