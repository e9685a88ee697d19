"""Backups, restores and the copy to PostgreSQL (``digestbot db backup|restore|copy``).

The promise of a restore: the backup's subscribers and settings come back, and what
the store it replaces recorded since is never undone: nothing sent is sent again,
unsubscribes, bounces and purges stay.  Checked by what reaches the SMTP sink: no
reader gets a paper twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_bytes
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.engine import HEAD_REVISION, make_engine, sessions, transaction, upgrade
from bot.store.schema import BodyItem, Digest, Entry, SubscriberRow
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import remove, save
from bot.tools.sink import Sink
from bot.unsubscribes import close_journal, journal_of
from tests.conftest import PG_SKIP, PG_URL, ROOT
from tests.helpers import DIGESTBOT, Cli, dump_text, postgres_schema, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY1 = datetime(2026, 6, 1, 12, tzinfo=UTC)
READERS = [f"r{i}@example.org" for i in range(6)]


class Place:
    """A SQLite store in a folder, used in this process and by the command line."""

    def __init__(self, folder: Path, sink: Sink) -> None:
        self.folder, self.sink = folder, sink
        self.url = f"sqlite:///{folder / 'cli.sqlite3'}"
        self.settings = settings_for(
            folder, smtp={"port": sink.port, "timeout_seconds": 10}, database={"url": self.url}
        )
        self.cli = Cli(folder, {"DIGESTBOT_SMTP__PORT": str(sink.port)})
        self.open()
        upgrade(self.engine)

    def open(self) -> None:
        self.engine = make_engine(self.url)
        self.factory: sessionmaker[Session] = sessions(self.engine)

    def close(self) -> None:
        close_journal(self.url)
        self.engine.dispose()

    def day(self, n: int, *, deliver: bool = True) -> list[int]:
        """Day *n*'s dump, planning and (with *deliver*) delivery; the digests planned."""
        now = DAY1 + timedelta(days=n - 1)
        text = dump_text(8, seed=n, start=n * 1000)
        ingest_bytes(self.factory, text.encode(), name=f"day{n}", now=now - timedelta(hours=1), rules=RULES)
        planned = plan(self.factory, self.settings, RULES, now=now, all_due=True).planned
        if deliver:
            self.deliver(now)
        return list(planned)

    def deliver(self, now: datetime) -> None:
        asyncio.run(deliver_now(self.factory, Parts(self.settings), clock=lambda: now))

    def titles_received(self, factory: sessionmaker[Session] | None = None) -> dict[str, list[str]]:
        """Per reader, every paper title in the mail they received, once per message."""
        with (factory or self.factory)() as session:
            titles = [" ".join(t.split()) for t in session.scalars(select(Entry.title))]
        got: dict[str, list[str]] = {}
        for received in self.sink.received:
            body = received.message.get_body(("plain",))
            assert body is not None
            text = " ".join(body.get_content().split())
            for reader in received.recipients:
                got.setdefault(reader, []).extend(t for t in titles if f"] {t}" in text)
        return got

    def state_of(self, email: str) -> str | None:
        with self.factory() as session:
            found = get_subscriber(session, email)
        return None if found is None else found.status.value


def _started(place: Place) -> None:
    save(
        place.factory,
        place.settings,
        [clean_fields(e, filter="*", backfill="all") for e in READERS],
        DAY1 - timedelta(days=1),
    )


def _hold(place: Place, digest_ids: list[int], until: datetime) -> None:
    with transaction(place.factory) as session:
        session.execute(update(Digest).where(Digest.id.in_(digest_ids)).values(next_attempt_at=until))


def _after_the_backup(place: Place, held: list[int]) -> None:
    """What the store records after the backup: the rest of day 1 goes out, r0 leaves by
    their link, r1 asks to be forgotten, day 2 goes out."""
    _hold(place, held, DAY1)
    place.deliver(DAY1 + timedelta(minutes=5))
    with place.factory() as session:
        r0 = get_subscriber(session, "r0@example.org").id
    journal_of(place.factory).append([r0], DAY1 + timedelta(hours=3))
    remove(place.factory, "r1@example.org", purge=True, now=DAY1 + timedelta(hours=4))
    assert len(place.day(2)) == 4


def _assert_no_paper_twice(place: Place, factory: sessionmaker[Session] | None = None) -> Counter[str]:
    received = place.titles_received(factory)
    for reader, titles in received.items():
        assert len(titles) == len(set(titles)), f"{reader} got a paper twice"
    ids = Counter(r.message["Message-ID"] for r in place.sink.received)
    assert max(ids.values()) == 1
    return Counter(reader for r in place.sink.received for reader in r.recipients)


def test_a_backup_taken_mid_delivery_restored_sends_nothing_twice(tmp_path: Path, sink: Sink) -> None:
    place = Place(tmp_path, sink)
    _started(place)
    day1 = place.day(1, deliver=False)
    held = day1[3:]
    _hold(place, held, DAY1 + timedelta(days=1))  # still queued when the backup is taken
    place.deliver(DAY1)
    assert len(sink.received) == 3
    said = " ".join(place.cli("db", "backup", str(tmp_path / "b.sqlite3")).stdout.split())
    assert "6 subscribers, 6 digests, 0 unsubscribe requests" in said
    _after_the_backup(place, held)
    assert len(sink.received) == 6 + 4
    place.close()

    said = " ".join(place.cli("db", "restore", str(tmp_path / "b.sqlite3")).stdout.split())
    assert "the store it replaced is kept at" in said
    assert "1 subscriber unsubscribed or bounced since, 1 purged subscriber purged again" in said
    place.open()
    assert place.state_of("r0@example.org") == "unsubscribed" and place.state_of("r1@example.org") is None
    place.deliver(DAY1 + timedelta(days=1, hours=1))  # nothing of day 1 or 2 goes out again
    assert len(place.day(2)) == 0
    assert len(place.day(3)) == 4
    per_reader = _assert_no_paper_twice(place)
    assert per_reader == {"r0@example.org": 1, "r1@example.org": 1} | {r: 3 for r in READERS[2:]}
    with place.factory() as session:
        sent = session.scalar(select(func.count()).select_from(Digest).where(Digest.state == "sent"))
    assert sent == 5 + 4 + 4  # r1's day 1 went with them
    place.close()


def test_without_the_store_it_replaces_a_restore_sends_nothing_in_flight_again(tmp_path: Path, sink: Sink) -> None:
    place = Place(tmp_path, sink)
    _started(place)
    day1 = place.day(1, deliver=False)
    _hold(place, day1[3:], DAY1 + timedelta(days=1))
    place.deliver(DAY1)
    place.cli("db", "backup", str(tmp_path / "b.sqlite3"))
    _after_the_backup(place, day1[3:])
    place.close()
    for part in tmp_path.glob("cli.sqlite3*"):  # the disk holding the store is gone; the journal is not
        part.unlink()

    said = " ".join(place.cli("db", "restore", str(tmp_path / "b.sqlite3")).stdout.split())
    ids = ", ".join(f"#{n}" for n in day1[3:])
    assert f"3 digests on its way in the backup marked unknown ({ids})" in said
    assert "1 unsubscribe request will be applied on start" in said
    place.open()
    place.deliver(DAY1 + timedelta(days=1, hours=1))
    assert len(sink.received) == 10  # the three that had gone out after the backup stay unknown
    plan(place.factory, place.settings, RULES, now=DAY1 + timedelta(days=1, hours=2), all_due=True)
    assert place.state_of("r0@example.org") == "unsubscribed"  # the journal's request, applied again
    unknown = [json.loads(line) for line in place.cli("history", "--status", "unknown", "--json").stdout.splitlines()]
    assert [d["error"] for d in unknown] == ["on its way when the backup b.sqlite3 was taken: it may have gone out"] * 3
    place.close()


def test_backup_is_consistent_while_a_writer_holds_a_transaction(tmp_path: Path, sink: Sink) -> None:
    place = Place(tmp_path, sink)
    _started(place)
    place.day(1, deliver=False)
    journal_of(place.factory).append([2], DAY1)
    writer = sqlite3.connect(tmp_path / "cli.sqlite3", timeout=5)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE subscribers SET name = 'uncommitted'")
    try:
        said = " ".join(place.cli("db", "backup", str(tmp_path / "b.sqlite3")).stdout.split())
    finally:
        writer.rollback()
        writer.close()
    assert "1 unsubscribe request" in said
    with sqlite3.connect(tmp_path / "b.sqlite3") as copy:
        assert copy.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        assert copy.execute("SELECT count(*) FROM subscribers WHERE name = 'uncommitted'").fetchone()[0] == 0
        assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one file, nothing beside it
    assert not Path(f"{tmp_path / 'b.sqlite3'}-wal").exists()
    place.close()


def test_backup_and_restore_refuse_bad_input_in_one_line(tmp_path: Path, sink: Sink) -> None:
    place = Place(tmp_path, sink)
    _started(place)
    cli = place.cli
    backup = tmp_path / "b.sqlite3"
    cli("db", "backup", str(backup))
    assert "already exists (--force replaces it)" in cli("db", "backup", str(backup), code=2).stderr
    cli("db", "backup", str(backup), "--force")
    assert "that is one of the store's own files" in cli("db", "backup", str(tmp_path / "cli.sqlite3"), code=2).stderr
    assert "no such folder" in cli("db", "backup", str(tmp_path / "no" / "b.sqlite3"), code=1).stderr
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"not a database at all" * 100)
    other = sqlite3.connect(tmp_path / "other.sqlite3")
    other.execute("CREATE TABLE t (x)")
    other.close()
    newer = tmp_path / "newer.sqlite3"
    newer.write_bytes(backup.read_bytes())
    with sqlite3.connect(newer) as db:
        db.execute("UPDATE alembic_version SET version_num = '9999'")
    for bad, code, words in (
        (tmp_path / "missing.sqlite3", 1, "no such file"),
        (junk, 1, "not a SQLite database"),
        (tmp_path / "other.sqlite3", 1, "not a digestbot store"),
        (newer, 2, f"newer than this digestbot's {HEAD_REVISION}"),
    ):
        result = cli("db", "restore", str(bad), code=code)
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    with place.factory() as session:  # nothing was touched
        assert session.scalar(select(func.count()).select_from(SubscriberRow)) == 6
    assert not list(tmp_path.glob("cli.sqlite3.before-restore-*"))
    place.close()


def test_restore_waits_for_the_daemon_to_stop(tmp_path: Path, sink: Sink) -> None:
    place = Place(tmp_path, sink)
    _started(place)
    place.cli("db", "backup", str(tmp_path / "b.sqlite3"))
    env = dict(place.cli.env, DIGESTBOT_PATHS__VAR_DIR=str(tmp_path / "var"))
    (tmp_path / "dumps").mkdir(exist_ok=True)
    worker = subprocess.Popen([DIGESTBOT, "worker"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        lock = Path(f"{tmp_path / 'cli.sqlite3'}.worker.lock")
        deadline = datetime.now(UTC) + timedelta(seconds=30)
        while not (lock.exists() and lock.read_text().strip()):
            assert datetime.now(UTC) < deadline, "the worker did not start"
            threading.Event().wait(0.1)
        refused = place.cli("db", "restore", str(tmp_path / "b.sqlite3"), code=2).stderr
        assert f"digestbot worker (pid {worker.pid}) has it open; stop it before restoring" in refused
        assert "stop it before copying" in place.cli("db", "copy", "--to", "postgresql://x@127.0.0.1/x", code=2).stderr
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    place.close()


@PG_SKIP
def test_backup_and_restore_on_postgresql_name_pg_dump(sink: Sink, tmp_path: Path) -> None:
    with postgres_schema(PG_URL) as url:
        cli = Cli(tmp_path, {"DIGESTBOT_DATABASE__URL": url})
        said = cli("db", "backup", "b.dump", code=2).stderr
        assert "pg_dump --format=custom --file b.dump" in said
        assert "pg_restore --clean --if-exists" in cli("db", "restore", "b.dump", code=2).stderr


@PG_SKIP
@pytest.mark.slow
def test_a_store_copied_to_postgresql_goes_on_with_a_scheduler_and_two_workers(tmp_path: Path, sink: Sink) -> None:
    place = Place(tmp_path, sink)
    _started(place)
    place.day(1)
    day2 = place.day(2, deliver=False)
    _hold(place, day2[:2], DAY1 + timedelta(days=1))
    place.deliver(DAY1 + timedelta(days=1))  # mid-history: two of day 2 still queued
    with place.factory() as session:
        r5 = get_subscriber(session, "r5@example.org").id
        before = {
            table: session.scalar(select(func.count()).select_from(model))
            for table, model in (("digests", Digest), ("body_items", BodyItem), ("entries", Entry))
        }
    journal_of(place.factory).append([r5], DAY1 + timedelta(days=1))  # pending: applied before the copy
    place.close()
    with postgres_schema(PG_URL) as url:
        said = place.cli("db", "copy", "--to", url).stdout
        assert f"body_items: {before['body_items']:,} rows, {before['body_items']:,} in the copy" in said
        assert f"digests: {before['digests']:,} rows" in said and "unsubscribe_requests: 1 row," in said
        again = place.cli("db", "copy", "--to", url, code=2).stderr
        assert "is not empty" in again
        engine = make_engine(url)
        factory = sessions(engine)
        with factory() as session:
            assert get_subscriber(session, "r5@example.org").status.value == "unsubscribed"
            highest = session.scalar(select(func.max(Digest.id)))
        _hold_pg = update(Digest).where(Digest.id.in_(day2[:2])).values(next_attempt_at=datetime.now(UTC))
        with factory() as session, session.begin():
            session.execute(_hold_pg)
        dumps = tmp_path / "dumps"
        dumps.mkdir(exist_ok=True)
        (dumps / "day3.txt").write_text(dump_text(8, seed=3, start=3000), encoding="utf-8")
        os.utime(dumps / "day3.txt", (0, 0))
        env = dict(
            place.cli.env,
            DIGESTBOT_DATABASE__URL=url,
            DIGESTBOT_PATHS__DUMP_DIR=str(dumps),
            DIGESTBOT_PATHS__TEMPLATES_DIR=str(ROOT / "templates"),
            DIGESTBOT_PATHS__VAR_DIR=str(tmp_path / "var"),
            DIGESTBOT_WATCH__QUIET_SECONDS="0",
            DIGESTBOT_WATCH__INTERVAL_SECONDS="1",
        )
        for reader in READERS:  # due now, whatever the hour
            Cli(tmp_path, env, placed=False)("subscribers", "edit", reader, "--tz", "UTC", "--hour", "0")
        daemons = [subprocess.Popen([DIGESTBOT, "scheduler"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)]
        daemons += [
            subprocess.Popen([DIGESTBOT, "worker"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            deadline = datetime.now(UTC) + timedelta(seconds=120)
            while len(sink.received) < 6 + 6 + 5:  # day 1, day 2 and today, but r5 today
                assert datetime.now(UTC) < deadline, f"{len(sink.received)} messages"
                threading.Event().wait(0.5)
            threading.Event().wait(3)  # nothing more comes
        finally:
            for daemon in daemons:
                daemon.send_signal(signal.SIGTERM)
            for daemon in daemons:
                assert daemon.wait(timeout=60) == 0
                assert daemon.stderr is not None and "Traceback" not in daemon.stderr.read()
        with factory() as session:
            newer = session.scalar(select(func.count()).select_from(Digest).where(Digest.id > highest))
        counts = _assert_no_paper_twice(place, factory)
        engine.dispose()
    assert newer == 5  # today's, numbered past the copied ids
    assert counts == {"r5@example.org": 2} | {r: 3 for r in READERS[:5]}


def test_backup_and_restore_take_any_file_name(tmp_path: Path, sink: Sink) -> None:
    """The journal and the replaced store are attached by URI: a name with spaces, '?'
    or '#' must not be read as one."""
    place = Place(tmp_path, sink)
    _started(place)
    journal_of(place.factory).append([3], DAY1)
    place.close()
    odd = tmp_path / "back up #1?.sqlite3"
    assert "1 unsubscribe request" in " ".join(place.cli("db", "backup", str(odd)).stdout.split())
    said = " ".join(place.cli("db", "restore", str(odd)).stdout.split())
    assert "kept from it: 0 digests" in said and "1 unsubscribe request will be applied on start" in said
    assert sorted(p.name for p in tmp_path.iterdir() if "?" in p.name or "#" in p.name) == [odd.name]


@PG_SKIP
def test_a_store_holding_nul_copies_and_a_failed_copy_says_one_short_line(tmp_path: Path, sink: Sink) -> None:
    """Issue 47, item 2: a NUL a feed brought in before ingest left them out stopped every
    `db copy`, whose message carried some 10 KB of row contents."""
    place = Place(tmp_path, sink)
    _started(place)
    place.day(1)
    first = "(SELECT min(id) FROM entries)"
    with place.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE entries SET summary = summary || char(0) || 'tail' WHERE id = {first}")
        conn.exec_driver_sql(f"UPDATE entries SET authors = '[\"A\\u0000B\"]' WHERE id = {first}")
        conn.exec_driver_sql("UPDATE subscribers SET name = 'Nul' || char(0) || 'Name' WHERE id = 1")
    place.close()
    with postgres_schema(PG_URL) as url:
        place.cli("db", "copy", "--to", url)
        engine = make_engine(url)
        with engine.connect() as conn:
            summary, authors = conn.exec_driver_sql(
                "SELECT summary, authors::text FROM entries WHERE id = (SELECT min(id) FROM entries)"
            ).one()
            name = conn.exec_driver_sql("SELECT name FROM subscribers WHERE id = 1").scalar_one()
        engine.dispose()
    assert summary.endswith("tail") and "\x00" not in summary and name == "NulName" and "\\u0000" not in authors
    with sqlite3.connect(tmp_path / "cli.sqlite3") as conn:  # a key PostgreSQL's column cannot hold
        conn.execute(f"UPDATE entries SET key = '{'k' * 300}' WHERE id = (SELECT max(id) FROM entries)")
    with postgres_schema(PG_URL) as url:
        failed = place.cli("db", "copy", "--to", url, code=1).stderr
    assert len(failed.splitlines()) == 1 and len(failed) < 500, failed
    assert "value too long" in failed and "example.org" not in failed and "kkkkkkkkkk" not in failed
