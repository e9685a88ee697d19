"""Operations on the whole store (``db restore``, ``db copy``, ``db backup``) against
every process that may hold it, and backups as untrusted input.

A backup whose schema is not the one digestbot makes is refused in one line; a
restore that fails for any reason leaves the store as it was; restore and copy are
refused while any digestbot process has the store open; a backup never goes over one
of the store's own files; the signing key travels with the backup, and a store never
meets a new key without a word."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.tools.sink import Sink, SinkHandler, free_port
from tests.conftest import PG_SKIP, PG_URL, ROOT, SEEDS
from tests.helpers import DIGESTBOT, Cli, postgres_schema, wait_until_serving


def _cli(folder: Path, sink: Sink) -> Cli:
    return Cli(
        folder,
        {
            "DIGESTBOT_SMTP__PORT": str(sink.port),
            "DIGESTBOT_PATHS__VAR_DIR": str(folder / "var"),
            "DIGESTBOT_PATHS__TEMPLATES_DIR": str(ROOT / "templates"),
        },
    )


@pytest.fixture(scope="session")
def made_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a store holding the example readers, the seeds, and a digest sent
    to each active reader, with its key and lock file: made once per test process, each
    test's a copy (as ``migrated_sqlite`` is)."""
    folder = tmp_path_factory.mktemp("made") / "store"
    (folder / "dumps").mkdir(parents=True)
    with Sink(SinkHandler()) as sink:
        run = _cli(folder, sink)
        run("dumps", "ingest", str(SEEDS))
        run("subscribers", "import", str(ROOT / "config" / "subscribers.example.csv"))
        run("send-now")
        assert len(sink.received) > 0
    return folder


@pytest.fixture
def cli(tmp_path: Path, sink: Sink, made_store: Path) -> Cli:
    """A store with the example readers, the seeds, and a digest sent to each active reader."""
    folder = tmp_path / "store"
    shutil.copytree(made_store, folder)
    return _cli(folder, sink)


def readers(cli: Cli) -> list[dict[str, object]]:
    return [json.loads(line) for line in cli("subscribers", "list", "--json").stdout.splitlines()]


def one_line(text: str) -> str:
    """The one line a refusal prints (``serve``'s notes about the configuration aside)."""
    lines = [line for line in text.strip().splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def backup(cli: Cli, name: str = "b.sqlite3") -> Path:
    target = cli.folder / name
    cli("db", "backup", str(target))
    return target


def tampered(original: Path, *statements: str, name: str = "t.sqlite3") -> Path:
    """A copy of *original* changed by *statements* (run with foreign keys off)."""
    copy = original.with_name(name)
    copy.write_bytes(original.read_bytes())
    with sqlite3.connect(copy) as connection:
        connection.execute("PRAGMA foreign_keys=OFF")
        for statement in statements:
            connection.execute(statement)
    return copy


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial" in p.name or "-restore-" in p.name)


HOSTILE = {
    "a trigger that rewrites addresses": (
        "CREATE TRIGGER hijack AFTER INSERT ON digests BEGIN "
        "UPDATE subscribers SET email = 'hijack+' || id || '@evil.example'; END",
        "trigger 'hijack' on 'digests'",
    ),
    "a trigger that undoes an unsubscribe": (
        "CREATE TRIGGER stay AFTER UPDATE OF status ON subscribers BEGIN "
        "UPDATE subscribers SET status = 'active' WHERE id = new.id; END",
        "trigger 'stay' on 'subscribers'",
    ),
    "a view": ("CREATE VIEW everyone AS SELECT email FROM subscribers", "view 'everyone'"),
    "a table": ("CREATE TABLE evil (x)", "table 'evil'"),
    "an index": ("CREATE INDEX ix_evil ON subscribers (name)", "index 'ix_evil' on 'subscribers'"),
    "a column": ("ALTER TABLE subscribers ADD COLUMN evil TEXT", "table 'subscribers' has other columns"),
    "a generated column": (
        "ALTER TABLE subscribers ADD COLUMN shadow TEXT GENERATED ALWAYS AS ('x@evil.example') VIRTUAL",
        "table 'subscribers' has other columns",
    ),
    "an index dropped": ("DROP INDEX ix_subscribers_status", "has no index 'ix_subscribers_status'"),
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_a_backup_with_a_schema_digestbot_never_makes_is_refused(cli: Cli, case: str) -> None:
    """Item 3: a restore ran a backup's trigger (11 of 21 addresses rewritten) and kept
    one that set an unsubscribed reader back to active."""
    statement, named = HOSTILE[case]
    before = readers(cli)
    hostile = tampered(backup(cli), statement)
    said = one_line(cli("db", "restore", str(hostile), code=1).stderr)
    assert (
        named in said
        and "is restored only as digestbot writes one" in said
        or "not a whole backup" in said
        or ("other columns" in said)
    ), said
    assert readers(cli) == before and leftovers(cli.folder) == []
    cli("db", "restore", str(cli.folder / "b.sqlite3"))  # the backup as written is restored
    cli("subscribers", "remove", "ada@example.org")
    assert {r["email"]: r["status"] for r in readers(cli)}["ada@example.org"] == "unsubscribed"
    with sqlite3.connect(cli.folder / "cli.sqlite3") as connection:
        kinds = {row[0] for row in connection.execute("SELECT type FROM sqlite_master")}
    assert kinds == {"table", "index"}


FAILURES = {
    "a revision with a suffix": (["UPDATE alembic_version SET version_num = '0023a'"], "'0023a', which no digestbot"),
    "an empty revision": (["UPDATE alembic_version SET version_num = ''"], "'', which no digestbot"),
    "two revisions": (["INSERT INTO alembic_version VALUES ('0002')"], "names 2 schema revisions"),
    "an older revision's name": (["UPDATE alembic_version SET version_num = '0001'"], "that digestbot's schema 0001"),
    "no subscribers table": (["DROP TABLE subscribers"], "has no table 'subscribers'"),
    "rows naming missing rows": (["DELETE FROM subscribers WHERE email = 'grace@example.org'"], "rows name missing"),
}


@pytest.mark.parametrize("case", list(FAILURES), ids=list(FAILURES))
def test_a_restore_that_fails_leaves_the_store_as_it_was(cli: Cli, case: str) -> None:
    """Item 4: these left the bad backup as the live store, the original only aside,
    and every later command failing."""
    statements, named = FAILURES[case]
    before = readers(cli)
    bad = tampered(backup(cli), *statements)
    said = one_line(cli("db", "restore", str(bad), code=1).stderr)
    assert named in said, said
    assert readers(cli) == before and leftovers(cli.folder) == []
    cli("send-now")  # and every later command works


def test_a_restore_that_fails_after_the_swap_puts_the_store_back(cli: Cli) -> None:
    before = readers(cli)
    saved = backup(cli)
    journal = cli.folder / "cli-unsubscribes.sqlite3"
    os.replace(journal, cli.folder / "journal.saved")
    journal.mkdir()  # the journal cannot be opened: the last step of a restore fails
    try:
        said = one_line(cli("db", "restore", str(saved), code=1).stderr)
    finally:
        journal.rmdir()
        os.replace(cli.folder / "journal.saved", journal)
    assert "is as it was" in said and "the restored copy is at" in said
    assert readers(cli) == before
    assert [name for name in leftovers(cli.folder) if "before-restore" in name] == []


def test_a_backup_of_an_older_schema_is_restored_and_brought_up_to_date(tmp_path: Path) -> None:
    from bot.store.engine import make_engine, upgrade

    old = tmp_path / "old.sqlite3"
    engine = make_engine(f"sqlite:///{old}")
    upgrade(engine, "0020")
    with engine.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO subscribers (id, email, email_key, name, filter, timezone, send_hour, status, backfill, "
            "unsubscribe_secret, bounces, created_at, updated_at) VALUES (1, 'old@example.org', "
            "'old@example.org', 'Old', '*', 'UTC', 7, 'active', '7d', 's', 0, '2026-01-01', '2026-01-01')"
        )
    engine.dispose()
    cli = Cli(tmp_path, {"DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var")})
    said = cli("db", "restore", str(old)).stdout
    assert "(schema 0020)" in said
    assert [r["email"] for r in readers(cli)] == ["old@example.org"]


def test_a_restore_takes_no_kept_ranking_from_a_backup(cli: Cli) -> None:
    """A kept ranking is derived data the planner trusts to order what it picks: a
    backup's bytes for one are left behind, and the next pass makes it again."""
    saved = backup(cli)
    with sqlite3.connect(saved) as connection:
        assert connection.execute("SELECT count(*) FROM filter_rankings").fetchone()[0] > 0
    forged = tampered(saved, "UPDATE filter_rankings SET body = x'5352320100000000000000'")
    cli("db", "restore", str(forged))
    store = cli.folder / "cli.sqlite3"
    with sqlite3.connect(store) as connection:
        assert connection.execute("SELECT count(*) FROM filter_rankings").fetchone()[0] == 0
    cli("send-now")  # plans again, from what the store holds
    with sqlite3.connect(store) as connection:
        assert connection.execute("SELECT count(*) FROM filter_rankings").fetchone()[0] > 0


def test_a_restore_names_the_readers_it_loses_since_the_backup(cli: Cli) -> None:
    """Item 5: a reader added after the backup vanished from the store without a word."""
    saved = backup(cli)
    cli("subscribers", "add", "zed@example.org")
    cli("subscribers", "edit", "ada@example.org", "--filter", "gpu")
    said = " ".join(cli("db", "restore", str(saved)).stdout.split())
    assert "gone since the backup: 1 reader added since the backup, not in it (zed@example.org)" in said
    assert "1 reader whose settings are as they were at the backup (ada@example.org)" in said


@pytest.fixture
def serving(cli: Cli) -> Iterator[subprocess.Popen[str]]:
    """``digestbot serve`` in a process of its own, on the fixture's store."""
    port = free_port()
    env = cli.env | {"DIGESTBOT_WEB__LISTEN_PORT": str(port)}
    proc = subprocess.Popen([DIGESTBOT, "serve"], cwd=cli.folder, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_serving(proc, port)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_restore_and_copy_are_refused_while_serve_has_the_store_open(cli: Cli, serving: subprocess.Popen[str]) -> None:
    """Items 5 and 6: with serve up, a restore went ahead and the manage page's later
    changes went to the store moved aside; a copy lost unsubscribes acknowledged meanwhile."""
    saved = backup(cli)  # a backup is taken while serve runs
    said = one_line(cli("db", "restore", str(saved), code=2).stderr)
    assert f"digestbot serve (pid {serving.pid}) has it open; stop it before restoring" in said
    copied = one_line(cli("db", "copy", "--to", "postgresql+psycopg://x@127.0.0.1/x", code=2).stderr)
    assert f"digestbot serve (pid {serving.pid}) has it open; stop it before copying" in copied
    assert leftovers(cli.folder) == []
    serving.send_signal(signal.SIGTERM)
    assert serving.wait(timeout=30) == 0
    cli("db", "restore", str(saved))


def test_no_process_opens_the_store_while_a_restore_or_copy_holds_it(cli: Cli) -> None:
    from bot.store.store_holders import alone

    with alone(cli.folder / "cli.sqlite3", "testing"):
        for command in (["subscribers", "list"], ["serve", "--port", str(free_port())], ["run", "--once"]):
            said = one_line(cli(*command, code=1, own_process=True).stderr)
            assert f"(pid {os.getpid()}) is restoring or copying it; try again when it is done" in said, said
    cli("subscribers", "list", own_process=True)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def test_a_backup_never_goes_over_one_of_the_stores_own_files(cli: Cli, serving: subprocess.Popen[str]) -> None:
    """Item 7: `db backup var/digestbot.sqlite3-wal --force` replaced serve's live WAL."""
    folder = cli.folder
    (folder / "link-to-wal").symlink_to(folder / "cli.sqlite3-wal")
    targets = [
        "cli.sqlite3",
        "cli.sqlite3-wal",
        "cli.sqlite3-shm",
        "cli.sqlite3-journal",
        "cli-unsubscribes.sqlite3",
        "cli-unsubscribes.sqlite3-wal",
        "cli.sqlite3.lock",
        "cli.sqlite3.worker.lock",
        "var/signing.key",
        "var/signing",  # its key would go to var/signing.key
        "link-to-wal",
    ]
    files = [p for p in folder.rglob("*") if p.is_file()]
    before = {p: _digest(p) for p in files}
    for target in targets:
        said = one_line(cli("db", "backup", str(folder / target), "--force", code=2).stderr)
        assert "that is one of the store's own files" in said, said
    assert {p: _digest(p) for p in files} == before
    assert serving.poll() is None
    cli("subscribers", "list", own_process=True)


@pytest.mark.slow
def test_the_signing_key_goes_with_the_backup_and_a_lost_key_stops_every_start(cli: Cli, sink: Sink) -> None:
    """Item 8: with var/signing.key gone, serve made a new key without a word, and every
    link already mailed answered 404."""
    key = cli.folder / "var" / "signing.key"
    original = key.read_bytes()
    saved = backup(cli)
    beside = saved.with_name("b.sqlite3.key")
    assert beside.read_bytes() == original and (beside.stat().st_mode & 0o777) == 0o600
    key.unlink()
    for command in (
        ["serve"],
        ["send-now"],
        ["run", "--once"],
        ["worker"],
        ["preview", "ada@example.org", "--eml", "out.eml"],
    ):
        said = one_line(cli(*command, code=2, own_process=True).stderr)
        assert f"{key} is missing, and this store's links were signed with it" in said, said
        assert not key.exists()
    said = cli("db", "restore", str(saved)).stdout
    assert f"signing key put back from {beside}" in " ".join(said.split())
    assert key.read_bytes() == original
    cli("send-now")
    other = {"DIGESTBOT_WEB__SIGNING_KEY": "another key, long enough to sign"}
    said = one_line(cli("serve", code=2, env=other, own_process=True).stderr)
    assert "the signing key (DIGESTBOT_WEB__SIGNING_KEY) is not the one this store's links were signed with" in said
    said = cli("db", "adopt-key", env=other).stdout
    assert "the links mailed before answer 404" in said
    cli("send-now", env=other)


@PG_SKIP
def test_a_copy_holds_the_store_and_keeps_its_key(cli: Cli) -> None:
    with postgres_schema(PG_URL) as url:
        cli("db", "copy", "--to", url)
        said = one_line(
            cli("send-now", code=2, env={"DIGESTBOT_DATABASE__URL": url, "DIGESTBOT_WEB__SIGNING_KEY": "x" * 20}).stderr
        )
        assert "is not the one this store's links were signed with" in said
        cli("send-now", env={"DIGESTBOT_DATABASE__URL": url})


def test_an_emptied_store_file_is_refused_not_taken_for_a_new_store(cli: Cli) -> None:
    """Item 14: a zero-length store file silently became a fresh store, every reader gone."""
    saved = backup(cli)
    store = cli.folder / "cli.sqlite3"
    for part in (Path(f"{store}-wal"), Path(f"{store}-shm")):
        part.unlink(missing_ok=True)
    store.write_bytes(b"")
    for command in (["subscribers", "list"], ["run", "--once"], ["serve"]):
        said = one_line(cli(*command, code=2).stderr)
        assert "the store is an empty file, and digestbot used it before: it was truncated" in said, said
    assert store.stat().st_size == 0
    cli("db", "restore", str(saved))
    assert len(readers(cli)) == 5
    # An empty file no digestbot ever opened (a `touch`, another program's peek) is a new store.
    fresh = Cli(cli.folder / "new", {"DIGESTBOT_PATHS__VAR_DIR": str(cli.folder / "new" / "var")})
    (cli.folder / "new").mkdir()
    (cli.folder / "new" / "cli.sqlite3").write_bytes(b"")
    assert fresh("subscribers", "list", "--json").stdout == ""
