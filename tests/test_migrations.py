"""Alembic migrations and the declared models stay the same schema."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, func, inspect, select, text
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import DigestContent, DigestKind
from bot.domain.identity import key_for_title_hash
from bot.domain.rankers import Interleaving, JudgedDigest
from bot.ingest.storing import ingest_bytes, ingest_file
from bot.plan import plan, resend
from bot.store.contents import digest_contents
from bot.store.engine import (
    HEAD_REVISION,
    current_revision,
    downgrade,
    head_revision,
    make_engine,
    sessions,
    transaction,
    upgrade,
)
from bot.store.interleaved import judged_since
from bot.store.queue import claim_due
from bot.store.schema import Base, Digest, Entry
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from tests.conftest import FIXTURES, ROOT
from tests.helpers import claims, settings_for


def test_upgraded_database_matches_models(engine: Engine) -> None:
    assert current_revision(engine) == head_revision() == HEAD_REVISION
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_sqlite_connections_use_wal_and_foreign_keys(engine: Engine) -> None:
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    assert {"sources", "entries", "entry_appearances", "tags", "entry_tags", "feeds"} <= set(
        inspect(engine).get_table_names()
    )


def _title_hashes(engine: Engine) -> dict[str, int | None]:
    with engine.connect() as conn:
        return dict(conn.execute(select(Entry.key, Entry.title_hash)).all())


def test_title_hash_migration_round_trips_and_look_ups_still_match(engine: Engine, seed_files: list[Path]) -> None:
    factory = sessions(engine)
    for path in [*seed_files, FIXTURES / "arxiv_day1.rss", FIXTURES / "journal.atom"]:
        ingest_file(factory, path)
    stored = _title_hashes(engine)
    # Dump papers are keyed by their title: no second index entry; repos never by title.
    assert {k for k, h in stored.items() if h is None} == {k for k in stored if k.startswith(("paper:", "repo:"))}
    assert all(h is not None for k, h in stored.items() if k.startswith(("arxiv:", "doi:")))

    downgrade(engine, "0003")
    old = _title_hashes(engine)
    assert all(isinstance(h, int) for h in old.values())
    assert all(h == old[k] for k, h in stored.items() if h is not None)
    assert all(key_for_title_hash(old[k]) == k for k in stored if k.startswith("paper:"))

    upgrade(engine)
    assert _title_hashes(engine) == stored
    again = [ingest_bytes(factory, path.read_bytes() + b"\n", name=f"again-{path.name}") for path in seed_files]
    assert [r.new for r in again] == [0, 0, 0, 0]


def test_a_database_never_migrated_has_no_revision(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.sqlite3'}")
    assert current_revision(engine) is None
    upgrade(engine, "0007")
    assert current_revision(engine) == "0007"
    engine.dispose()


def _shown(factory: sessionmaker[Session]) -> tuple[dict[int, DigestContent], set[tuple[int, int, int]]]:
    with factory() as session:
        ids = list(session.scalars(select(Digest.id)))
        claimed = claims()
        ledger = {
            tuple(row)
            for row in session.execute(select(claimed.c.entry_id, claimed.c.subscriber_id, claimed.c.digest_id))
        }
        return digest_contents(session, ids), ledger  # type: ignore[return-value]


def test_body_items_migration_round_trips_what_every_digest_shows(
    engine: Engine, tmp_path: Path, seed_files: list[Path]
) -> None:
    """0019 moves the items from the ledger to one row per body: each digest (scheduled,
    manual, a resend) shows the same items before and after, down and up again."""
    factory = sessionmaker(engine, expire_on_commit=False)
    rules = load_rules(ROOT / "config" / "tags.toml")
    settings = settings_for(tmp_path)
    day = datetime(2026, 6, 14, 12, tzinfo=UTC)
    people = [clean_fields(f"{n}@example.org") for n in ("ada", "bob", "cy")]
    people.append(clean_fields("dee@example.org", filter="not snn"))
    save(factory, settings, people, day - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=day, rules=rules)
    scheduled = list(plan(factory, settings, rules, now=day, all_due=True).planned)
    ingest_file(factory, seed_files[1], now=day, rules=rules)
    manual = list(plan(factory, settings, rules, now=day, kind=DigestKind.MANUAL).planned)
    resend(factory, settings, scheduled[0], now=day)
    before, ledger = _shown(factory)
    assert len(before) == 2 * len(people) + 1 and sum(len(c.items) for c in before.values()) > 20
    with engine.connect() as conn:
        bodies = conn.execute(text("SELECT COUNT(DISTINCT body_key) FROM body_items")).scalar()
    assert bodies is not None and bodies < len(scheduled) + len(manual)  # three readers of "*" share one

    downgrade(engine, "0018")
    with engine.connect() as conn:
        fat = conn.execute(
            text("SELECT digest_id, position, key, why, url FROM ledger JOIN entries ON entries.id = entry_id")
        ).all()
    assert len(fat) == len(ledger) and all(why and url for *_, why, url in fat)
    for digest_id, content in before.items():
        if content.resend_of is None:
            rows = sorted((position, key) for d, position, key, _, _ in fat if d == digest_id)
            assert [key for _, key in rows] == [item.key for item in content.items]
    with engine.begin() as conn:  # as ``digest send`` left them before 0006: no body key
        conn.execute(text(f"UPDATE digests SET body_key = NULL WHERE id IN ({', '.join(map(str, manual))})"))

    upgrade(engine)
    assert _shown(factory) == (before, ledger)


def _two_readers_planned(
    engine: Engine, tmp_path: Path, dump: Path
) -> tuple[sessionmaker[Session], Settings, datetime, list[int]]:
    """Two readers of everything, a dump, and the digests of its day planned for them."""
    factory = sessionmaker(engine, expire_on_commit=False)
    rules = load_rules(ROOT / "config" / "tags.toml")
    settings = settings_for(tmp_path)
    day = datetime(2026, 6, 14, 12, tzinfo=UTC)
    save(factory, settings, [clean_fields(f"{n}@example.org") for n in ("ada", "bob")], day - timedelta(days=1))
    ingest_file(factory, dump, now=day, rules=rules)
    return factory, settings, day, list(plan(factory, settings, rules, now=day, all_due=True).planned)


def test_an_interleaved_digest_shows_and_judges_the_same_down_to_0028_and_up_again(
    engine: Engine, tmp_path: Path, seed_files: list[Path]
) -> None:
    """0029 pins an interleaved digest's order on the digest where 0028 gave it a body of
    its own: the way down writes that body again (and keeps the body it shares with
    other readers), the way up pins the order again; every digest (a resend of the
    interleaved one too) shows the same items, and the judge sees the same rankers."""
    factory, settings, day, planned = _two_readers_planned(engine, tmp_path, seed_files[0])
    ada, bob = planned
    with factory() as session:
        size = len(digest_contents(session, [ada])[ada].items)
    drafted = Interleaving("bm25", tuple(reversed(range(size))), frozenset(range(0, size, 2)))
    with transaction(factory) as session:
        session.execute(text("UPDATE digests SET state = 'sent', sent_at = :at"), {"at": day})
        pin = text("UPDATE digests SET interleaving = :d WHERE id = :id")
        session.execute(pin, {"d": drafted.as_text(), "id": ada})
        # A backup's hostile text: no interleaving of bob's body (true and false are no positions).
        hostile = {"ranker": "bm25", "order": [True, False, *range(2, size)], "theirs": []}
        session.execute(pin, {"d": json.dumps(hostile), "id": bob})
    resend(factory, settings, ada, now=day)

    def judged() -> list[JudgedDigest]:
        with factory() as session:
            return list(judged_since(session, day - timedelta(days=1)))

    before, ledger = _shown(factory)
    shown = [item.key for item in before[ada].items]
    assert shown == [item.key for item in reversed(before[bob].items)] and size > 2  # bob's: the body's order
    (judged_before,) = judged()  # the interleaved digest, not bob's
    assert (
        judged_before.digest_id == ada and list(judged_before.placed_by.values()).count("bm25") == size // 2 + size % 2
    )

    downgrade(engine, "0028")
    with engine.connect() as conn:
        placed = conn.execute(
            text(
                "SELECT e.key, b.placed_by FROM body_items b JOIN digests d ON d.body_key = b.body_key "
                "JOIN entries e ON e.id = b.entry_id WHERE d.id = :id ORDER BY b.position"
            ),
            {"id": ada},
        ).all()
    assert [key for key, _ in placed] == shown
    assert [ranker for _, ranker in placed] == [drafted.placed_by(n) for n in drafted.order]

    upgrade(engine)
    assert _shown(factory) == (before, ledger)
    assert judged() == [judged_before]


def test_the_ledger_becomes_the_bodies_and_keeps_every_claim_and_told_revision(
    engine: Engine, tmp_path: Path, seed_files: list[Path]
) -> None:
    """0021 drops the ledger: every (entry, subscriber) it held is still claimed after,
    by the digest that claimed it (through its body, or, for a digest that had ledger
    rows and no body, a body made of them), and when a revision was told moves to
    ``revision_notices``; down and up again gives the same."""
    factory = sessionmaker(engine, expire_on_commit=False)
    rules = load_rules(ROOT / "config" / "tags.toml")
    settings = settings_for(tmp_path)
    day = datetime(2026, 6, 14, 12, tzinfo=UTC)
    save(factory, settings, [clean_fields(f"{n}@example.org") for n in ("ada", "bob", "cy")], day - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=day, rules=rules)
    planned = list(plan(factory, settings, rules, now=day, all_due=True).planned)
    downgrade(engine, "0020")
    told = datetime(2026, 6, 20, 9, tzinfo=UTC)
    with engine.begin() as conn:
        ledger = {tuple(row) for row in conn.execute(text("SELECT entry_id, subscriber_id, digest_id FROM ledger"))}
        conn.execute(text("UPDATE ledger SET reported_at = :at WHERE digest_id = :d"), {"at": told, "d": planned[0]})
        conn.execute(text("UPDATE digests SET body_key = NULL WHERE id = :d"), {"d": planned[1]})
    assert len(ledger) > 10
    upgrade(engine)
    claimed = claims()
    with factory() as session:
        after = {
            tuple(row)
            for row in session.execute(select(claimed.c.entry_id, claimed.c.subscriber_id, claimed.c.digest_id))
        }
        notices = session.execute(text("SELECT entry_id, subscriber_id, reported_at FROM revision_notices")).all()
    assert after == ledger
    assert {(e, s) for e, s, _ in notices} == {(e, s) for e, s, d in ledger if d == planned[0]}
    downgrade(engine, "0020")
    with engine.connect() as conn:
        again = {tuple(row) for row in conn.execute(text("SELECT entry_id, subscriber_id, digest_id FROM ledger"))}
        reported = conn.execute(text("SELECT COUNT(*) FROM ledger WHERE reported_at IS NOT NULL")).scalar()
    assert again == ledger and reported == len(notices)
    upgrade(engine)


def _row_counts(engine: Engine) -> dict[str, int]:
    """Rows of the tables a subscriber's digests hang on; "ledger": the claims (a table before 0021)."""
    with engine.connect() as conn:
        counts = {
            table: int(conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar() or 0)  # noqa: S608
            for table in ("subscribers", "digests", "entries")
        }
        ledger = (
            text("SELECT COUNT(*) FROM ledger")
            if inspect(conn).has_table("ledger")
            else select(func.count()).select_from(claims())
        )
        counts["ledger"] = int(conn.execute(ledger).scalar() or 0)
        return counts


def test_a_downgrade_that_drops_a_subscriber_column_keeps_their_digests(
    engine: Engine, tmp_path: Path, seed_files: list[Path]
) -> None:
    """On SQLite a batch migration copies ``subscribers`` and drops the old table; with
    foreign keys on, that drop deleted every digest and ledger row of its subscribers
    (the downgrades of 0017, 0013 and 0012 drop subscriber columns in a batch)."""
    factory, _, _, planned = _two_readers_planned(engine, tmp_path, seed_files[0])
    assert planned
    before = _row_counts(engine)
    assert before["digests"] == 2 and before["ledger"] > 0
    downgrade(engine, "0018")  # the ledger holds its items again, as at 0011 and since
    at_0018 = _row_counts(engine)
    downgrade(engine, "0011")
    assert _row_counts(engine) == at_0018
    upgrade(engine)
    assert _row_counts(engine) == before
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1  # on again for the store's users
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []


def _shipped_revisions() -> list[str]:
    """Every revision before head, as ``bot/migrations/versions`` names them."""
    names = sorted(p.name[:4] for p in (ROOT / "bot" / "migrations" / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert names[-1] == HEAD_REVISION
    return names[:-1]


def _tables_and_rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        names = [t for t in inspect(conn).get_table_names() if t in Base.metadata.tables]
        return {t: int(conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar() or 0) for t in names}  # noqa: S608


def test_library_papers_from_before_0022_are_matched_by_title_when_their_entry_arrives(engine: Engine) -> None:
    """0022 writes each library paper's title key: a paper an export named by its arXiv
    id, kept before the migration, is matched by a dump that lists it by title."""
    from bot.store.library import library_of
    from bot.taste.library_service import import_library
    from tests.helpers import render_dump

    factory = sessions(engine)
    save(factory, Settings(), [clean_fields("keeper@example.org")], datetime(2026, 6, 1, tzinfo=UTC))
    export = b"@article{a, title={Spiking Chips: a Survey}, eprint={2606.09999}, archivePrefix={arXiv}}\n"
    import_library(factory, 1, export, datetime(2026, 6, 1, tzinfo=UTC))
    with engine.connect() as conn:
        written = conn.execute(text("SELECT key, title_key FROM library_papers")).all()
    downgrade(engine, "0021")
    upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT key, title_key FROM library_papers")).all() == written
    dump = render_dump([("Spiking chips - a survey", ["A"], datetime(2026, 6, 2).date(), "Chips.")])
    ingest_bytes(factory, dump.encode(), name="d")
    with factory() as session:
        assert [p.entry_id is not None for p in library_of(session, 1)] == [True]


@pytest.mark.slow
@pytest.mark.parametrize("revision", _shipped_revisions())
def test_a_store_at_every_shipped_revision_upgrades_and_sends_nothing_twice(
    engine: Engine, tmp_path: Path, revision: str
) -> None:
    """A store with subscribers, entries, digests sent and what the schema of *revision*
    holds of them, upgraded to head: no row lost, and the next day's planning sends only
    what each reader has not had.  The store at *revision* is made with this code and the
    downgrades (every migration's way back), from a store that lived at head."""
    from tests.helpers import dump_text

    factory = sessionmaker(engine, expire_on_commit=False)
    rules = load_rules(ROOT / "config" / "tags.toml")
    settings = settings_for(tmp_path, digest={"max_entries": 4})
    day = datetime(2026, 6, 14, 12, tzinfo=UTC)
    people = [clean_fields(f"r{n}@example.org", filter=f, backfill="all") for n, f in enumerate(["*", "gpu", "*"])]
    save(factory, settings, people, day - timedelta(days=2))
    for n in (1, 2):  # two days: some of it sent, the rest left over
        when = day + timedelta(days=n - 2)
        ingest_bytes(factory, dump_text(6, seed=n, start=n * 100).encode(), name=f"d{n}", now=when, rules=rules)
        plan(factory, settings, rules, now=when + timedelta(hours=1), all_due=True)
        with factory() as session, session.begin():
            session.execute(text("UPDATE digests SET state = 'sent', sent_at = planned_at WHERE state = 'queued'"))
    downgrade(engine, revision)
    old = _tables_and_rows(engine)
    with engine.connect() as conn:
        ledger = (
            {tuple(row) for row in conn.execute(text("SELECT subscriber_id, entry_id FROM ledger"))}
            if inspect(conn).has_table("ledger")
            else set()
        )
    upgrade(engine)
    assert current_revision(engine) == HEAD_REVISION
    now = _tables_and_rows(engine)
    assert {t: now[t] for t in old} == old, f"rows lost upgrading from {revision}"
    if "subscribers" not in old:  # a store of that release had entries only
        save(factory, settings, people, day)
    claimed = claims()
    with factory() as session:
        had = {tuple(row) for row in session.execute(select(claimed.c.subscriber_id, claimed.c.entry_id))}
    assert had >= ledger, f"claims lost upgrading from {revision}"
    ingest_bytes(factory, dump_text(6, seed=3, start=300).encode(), name="d3", now=day + timedelta(days=1), rules=rules)
    report = plan(factory, settings, rules, now=day + timedelta(days=1, hours=1), all_due=True)
    with factory() as session:
        given = session.execute(
            select(claimed.c.subscriber_id, claimed.c.entry_id).where(claimed.c.digest_id.in_(report.planned))
        ).all()
    assert report.planned and not had & set(given), f"sent again after upgrading from {revision}"


def test_an_unknown_digest_goes_down_to_0031_as_failed_and_is_never_sent_again(
    engine: Engine, tmp_path: Path, seed_files: list[Path]
) -> None:
    """0031's code knows no ``unknown``: the way down makes such a digest ``failed``,
    the final state it knows (sent again only by an operator), never one it retries."""
    factory, _, day, planned = _two_readers_planned(engine, tmp_path, seed_files[0])
    ada, bob = planned
    with transaction(factory) as session:
        session.execute(text("UPDATE digests SET state = 'unknown' WHERE id = :id"), {"id": ada})
    downgrade(engine, "0031")
    with engine.connect() as conn:
        states = dict(conn.execute(text("SELECT id, state FROM digests")).tuples().all())
    assert states == {ada: "failed", bob: "queued"}
    upgrade(engine)
    with transaction(factory) as session:
        taken = claim_due(session, now=day, worker="w", lease_seconds=60, limit=10)
    assert [claim.digest_id for claim in taken] == [bob]
