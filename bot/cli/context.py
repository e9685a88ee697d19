"""CLI context: what every command needs (settings, the parts loaded of their files, a
store), each loaded once on first use (``--help`` and ``init`` need none of them), and
the store opened as a command must have it: held open, migrated or refused in one line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from bot.cli.output import EXIT_USAGE, fail
from bot.cli.troubles import opened, shown_store

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from bot.choose.tagging import TagRules
    from bot.config import Settings
    from bot.mail.parts import Parts


@dataclass
class Context:
    """What every command needs: settings, tag rules and a store, each loaded once on
    first use (``--help`` and ``init`` need none of them)."""

    config_path: Path | None = None
    verbosity: int = 0
    log_format: Literal["text", "json"] = "text"
    _settings: Settings | None = None
    _engine: Engine | None = None
    _parts: Parts | None = None

    @property
    def settings(self) -> Settings:
        from bot.config import ConfigError, load_settings

        if self._settings is None:
            try:
                self._settings = load_settings(self.config_path)
            except ConfigError as exc:
                fail(str(exc), EXIT_USAGE)
        return self._settings

    @property
    def parts(self) -> Parts:
        """What the command loads of the settings' files (``bot.mail.parts``), each part
        when first used; one that cannot be loaded is a usage error naming its file."""
        from bot.mail.parts import Parts

        if self._parts is None:
            self._parts = Parts(self.settings, store=self.sessions)
        return self._parts

    def part(self, name: Literal["rules", "key", "signer", "all"]) -> None:
        """Load the part *name* now (every one: "all"), or exit with its one-line error."""
        from bot.config import ConfigError

        try:
            self.parts.check() if name == "all" else getattr(self.parts, name)
        except ConfigError as exc:
            fail(str(exc), EXIT_USAGE)

    @property
    def rules(self) -> TagRules:
        self.part("rules")
        return self.parts.rules

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = open_store(self.settings)
        return self._engine

    def link_key(self) -> bytes:
        """The key links are signed with, checked against the one the store remembers
        (``bot.tokens.store_signing_key``): a usage error when they differ.  A command
        that signs links mails too: every part is loaded, the DKIM signers with them."""
        self.part("all")
        return self.parts.key

    def close(self) -> None:
        """Close what the command opened (the store, its unsubscribe journal), as the
        end of the process would: for a command run inside a longer-lived one."""
        if self._engine is not None:
            from bot.unsubscribes import close_journal

            close_journal(self._engine.url.render_as_string(hide_password=False))
            self._engine.dispose()
            self._engine = None

    @property
    def dump_dir(self) -> Path:
        """The folder the watcher scans; a usage error when it is not there, so a typo
        in the config is not mistaken for "nothing new"."""
        folder = self.settings.paths.dump_dir
        if not folder.is_dir():
            fail(f"paths.dump_dir: {folder} is not a folder (it does not exist or is a file)", EXIT_USAGE)
        return folder

    def log_as_daemon(self) -> None:
        """A long-running process logs each event that matters (INFO) by default."""
        from bot import logs

        logs.configure(self.verbosity, self.log_format, daemon=True)

    def check_watch_inputs(self) -> None:
        """Exit with a usage error, before anything starts, when the dump folder or the
        tag rules a watching process needs cannot be read."""
        _ = self.dump_dir, self.rules

    def sessions(self, *, migrate: bool = True) -> sessionmaker[Session]:
        """Sessions on an up-to-date schema: SQLite is migrated on start, other
        databases must have been migrated with ``digestbot db upgrade``."""
        from bot.store import engine as store_engine

        if migrate and store_engine.is_sqlite(self.engine):
            upgrade_store(self.engine)
        elif migrate:
            current = known_revision(self.engine)
            if current != store_engine.HEAD_REVISION:
                fail(f"database schema is at {current or 'nothing'}; run 'digestbot db upgrade'", EXIT_USAGE)
        return store_engine.sessions(self.engine)


def open_store(settings: Settings) -> Engine:
    """The store's engine, held open by this process (``bot.store.store_holders``)."""
    from bot.store import engine as store_engine

    opened(settings.database_url)
    database = settings.database
    engine = store_engine.make_engine(
        settings.database_url,
        busy_timeout_ms=database.busy_timeout_ms,
        sqlite_cache_mb=database.sqlite_cache_mb,
    )
    _hold(engine)
    return engine


def _hold(engine: Engine) -> None:
    """Hold a SQLite store open for this process (``bot.store.store_holders``): refused
    while a restore or copy has it, and when its file was emptied (SQLite would
    take an empty file for a new store, and every reader with it)."""
    from bot.store.store_holders import StoreInUse, emptied, hold

    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return
    path = Path(database)
    try:
        hold(path)
    except StoreInUse as exc:
        engine.dispose()
        fail(str(exc))
    if emptied(path):
        engine.dispose()
        fail(
            f"{path}: the store is an empty file, and digestbot used it before: it was truncated. Restore a "
            "backup ('digestbot db restore FILE'), or move it aside to start a new store",
            EXIT_USAGE,
        )


def upgrade_store(engine: Engine) -> None:
    """Bring the store to this digestbot's schema; a newer one, or one it does not
    know, is refused in one line and left as it is."""
    from bot.store import engine as store_engine

    current = known_revision(engine)
    if current == store_engine.HEAD_REVISION:
        return
    from alembic.util import CommandError  # only when there is something to upgrade: it loads Alembic

    try:
        store_engine.upgrade(engine)
    except CommandError:  # a revision Alembic does not know: nothing was changed
        fail(
            f"{shown_store()}: its schema is {current!r}, which this digestbot does not know: "
            "restore a backup, or run the digestbot that wrote it",
            EXIT_USAGE,
        )


def known_revision(engine: Engine) -> str | None:
    """The store's schema revision; a newer one than this digestbot's is refused."""
    from bot.store import engine as store_engine

    current = store_engine.current_revision(engine)
    if current is not None and current > store_engine.HEAD_REVISION:
        fail(
            f"{shown_store()}: its schema is {current}, newer than this digestbot's "
            f"{store_engine.HEAD_REVISION}: upgrade digestbot, or restore a backup taken before",
            EXIT_USAGE,
        )
    return current
