"""Shared fixtures: a real, migrated SQLite database file per test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.store.engine import make_engine, sessions, upgrade
from bot.tools.sink import Sink, SinkHandler, free_port
from bot.unsubscribes import close_journal
from tests.chat_servers import ChatServers, chat_servers
from tests.helpers import postgres_copy, postgres_schema, postgres_template, wait_until_serving

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "seeds"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# One number of examples on every machine: a CI run draws new ones each time (nothing
# keeps hypothesis's database between fresh clones), so runs add up rather than one run
# drawing twice as many.
settings.register_profile(
    "suite", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.load_profile("suite")


PG_URL = os.environ.get("DIGESTBOT_TEST_PG", "")
PG_SKIP = pytest.mark.skipif(
    not PG_URL, reason="PostgreSQL tests need DIGESTBOT_TEST_PG=postgresql+psycopg://user@host/db (CI sets it)"
)


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store the migrations brought to head, once per test process: each test's
    store is a copy of it (test_migrations.py runs the migrations themselves)."""
    path = tmp_path_factory.mktemp("migrated") / "store.sqlite3"
    made = make_engine(f"sqlite:///{path}")
    upgrade(made)
    made.dispose()
    assert not path.with_name(path.name + "-wal").exists()  # all of it is in the one file
    return path


@pytest.fixture(scope="session")
def migrated_postgresql() -> Iterator[str]:
    """A PostgreSQL database the migrations brought to head, once per test process: each
    test's store is a copy of it (``CREATE DATABASE … TEMPLATE``, a fifth of a migration's
    time)."""
    with postgres_template(PG_URL) as name:
        yield name


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=PG_SKIP)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A migrated store: a SQLite file, and (with DIGESTBOT_TEST_PG) a fresh PostgreSQL database."""
    if request.param == "sqlite":
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), tmp_path / "store.sqlite3")
        eng = make_engine(f"sqlite:///{tmp_path / 'store.sqlite3'}")
        yield eng
        close_journal(eng.url.render_as_string(hide_password=False))
        eng.dispose()
        return
    with postgres_copy(PG_URL, request.getfixturevalue("migrated_postgresql")) as url:
        eng = make_engine(url)
        yield eng
        # A journal left open keeps its connections: PostgreSQL runs out after some 50 tests.
        close_journal(eng.url.render_as_string(hide_password=False))
        eng.dispose()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL schema's URL, for the processes a test starts."""
    with postgres_schema(PG_URL) as url:
        migrated = make_engine(url)
        upgrade(migrated)
        migrated.dispose()
        yield url


@pytest.fixture
def factory(engine: Engine) -> sessionmaker[Session]:
    return sessions(engine)


@pytest.fixture
def seed_files() -> list[Path]:
    return sorted(SEEDS.glob("*.txt"))


@pytest.fixture
def dump_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "dumps"
    folder.mkdir()
    return folder


def copy_aged(src: Path, dest_dir: Path, name: str | None = None, age_seconds: float = 3600) -> Path:
    """Copy *src* into *dest_dir* with an mtime in the past, as a settled file."""
    dest = dest_dir / (name or src.name)
    shutil.copyfile(src, dest)
    st = dest.stat()
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns - int(age_seconds * 1e9)))
    return dest


@pytest.fixture
def handler() -> SinkHandler:
    """What the test SMTP server does with each message (faults can be scripted on it)."""
    return SinkHandler()


@pytest.fixture
def sink(handler: SinkHandler) -> Iterator[Sink]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 for the test's duration."""
    with Sink(handler) as running:
        yield running


def _wordllama_missing() -> str | None:
    try:
        import wordllama  # noqa: F401, PLC0415 - only to know it is there
    except ImportError:
        return "wordllama is not installed (pip install -e '.[test]' installs it)"
    return None


@pytest.fixture(scope="module")
def wordllama_url() -> Iterator[str]:
    """The example embedding server (examples/embeddings/) with WordLlama, as a process."""
    missing = _wordllama_missing()
    if missing is not None:
        pytest.skip(missing)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "embeddings" / "wordllama_server.py"), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(server, port, seconds=60)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def chat_server_process() -> Iterator[ChatServers]:
    """The local server speaking the chat services' APIs (``tests/chat_servers.py``), a
    process for each test module that asks for it."""
    with chat_servers() as running:
        yield running


@pytest.fixture
def chat(chat_server_process: ChatServers) -> ChatServers:
    """That server, calm again and with nothing received."""
    chat_server_process.control("calm")
    return chat_server_process
