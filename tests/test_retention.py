"""Retention (``database.keep_days``): old digests go, with what they carried to whom
and the bodies no kept digest shows, and nothing is ever sent twice.

The property: over months of daily dumps with retention running, subscribers whose
digests are cancelled (their watermark dropped, so their window would reach back to
when they joined), who change their filter, who joined with ``backfill = all``, no
subscriber is ever given an entry twice, although the digests (and their bodies) that
remembered the old ones are gone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.domain import DigestState
from bot.ingest.storing import ingest_bytes
from bot.mail.parts import Parts
from bot.plan import DigestNotFound, plan, resend
from bot.plan.retention import kept_since, remove_expired
from bot.store.contents import digest_content
from bot.store.engine import transaction
from bot.store.ledger import release_entries
from bot.store.retention import removed
from bot.store.schema import AppearanceRow, BodyItem, Digest, Entry, Source
from bot.store.subscribers import list_subscribers
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import remove, save, set_filter
from tests.conftest import ROOT
from tests.helpers import Cli, claims, digest_entry_ids, dump_text, filter_expressions, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
START = datetime(2026, 1, 5, 12, tzinfo=UTC)
KEEP = 60


def _settings(tmp_path: Path, **digest: object) -> Settings:
    return settings_for(tmp_path, database={"keep_days": KEEP}, digest=digest)


def _deliver(factory: sessionmaker[Session], now: datetime) -> None:
    """What a worker does with every queued digest, as far as the store is concerned."""
    with transaction(factory) as session:
        session.execute(
            update(Digest).where(Digest.state == DigestState.QUEUED.value).values(state="sent", sent_at=now)
        )


def _ingest(factory: sessionmaker[Session], day: int, now: datetime, count: int = 6) -> None:
    text = dump_text(count, seed=day, start=day * 100)
    ingest_bytes(factory, text.encode(), name=f"day-{day}", now=now - timedelta(hours=1), rules=RULES)


def test_months_of_retention_never_send_an_entry_twice(factory: sessionmaker[Session], tmp_path: Path) -> None:
    cfg = _settings(tmp_path, max_entries=4, max_age_days=30)
    filters = filter_expressions(12)
    people = [clean_fields(f"r{i}@example.org", filter=f, backfill="all") for i, f in enumerate(filters[:4])]
    people += [clean_fields("everything@example.org", filter="*", backfill="all")]
    save(factory, cfg, people, START - timedelta(days=1))
    given: dict[int, list[int]] = {}
    now = START
    for day in range(0, 200, 4):  # every fourth day for 200 days: left-overs, long gaps
        _ingest(factory, day, now)
        with factory() as session:
            everyone = list_subscribers(session)
            latest = session.scalars(select(Digest.id).where(Digest.state == "sent").order_by(Digest.id.desc()))
            last_sent = list(latest)[:2]
        if day % 20 == 8:  # the reader left meanwhile: entries given back, watermark dropped
            for digest_id in last_sent:
                with transaction(factory) as session:
                    digest = session.get(Digest, digest_id)
                    for entry_id in digest_entry_ids(session, digest_id):  # never sent after all
                        given[digest.subscriber_id].remove(entry_id)
                    digest.state = DigestState.CANCELLED.value
                    release_entries(session, digest_id)
        if day % 28 == 12:
            set_filter(factory, cfg, everyone[day % len(everyone)], filters[day % 12], now - timedelta(hours=2))
        report = plan(factory, cfg, RULES, now=now, all_due=True)
        with factory() as session:
            for digest_id in report.planned:
                sid = session.get(Digest, digest_id).subscriber_id
                given.setdefault(sid, []).extend(digest_entry_ids(session, digest_id))
        _deliver(factory, now)
        remove_expired(factory, cfg, now=now, pause=0)
        now += timedelta(days=4)
    for sid, entries in given.items():
        assert len(entries) == len(set(entries)), f"subscriber {sid} got an entry twice"
    with factory() as session:
        oldest = session.scalar(select(func.min(Digest.planned_at)))
        gone = removed(session)
        unshown = session.scalar(
            select(func.count())
            .select_from(BodyItem)
            .where(~select(Digest.id).where(Digest.body_key == BodyItem.body_key).exists())
        )
    assert oldest >= kept_since(cfg, now - timedelta(days=4))
    assert gone is not None and gone.digests > 0
    assert unshown == 0
    assert sum(len(e) for e in given.values()) > 100  # the readers did get their papers


def _one_day(factory: sessionmaker[Session], cfg: Settings, day: int, readers: int = 3) -> list[int]:
    """Readers (on day 0), a dump, a planning pass and delivery on START + *day*; the digests."""
    now = START + timedelta(days=day)
    if day == 0:
        save(factory, cfg, [clean_fields(f"r{i}@example.org") for i in range(readers)], now - timedelta(days=1))
    _ingest(factory, day, now)
    planned = plan(factory, cfg, RULES, now=now, all_due=True).planned
    _deliver(factory, now)
    return list(planned)


def test_resends_within_retention_show_what_was_sent_and_older_ones_say_why_not(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    cfg = _settings(tmp_path)
    old = _one_day(factory, cfg, 0)
    recent = _one_day(factory, cfg, 30)
    with factory() as session:
        shown = {d: digest_content(session, d).items for d in old + recent}
    _ingest(factory, 31, START + timedelta(days=31))  # changes nothing that was sent
    report = remove_expired(factory, cfg, now=START + timedelta(days=KEEP - 1), pause=0)
    assert report.digests == 0
    copy = resend(factory, cfg, old[0], now=START + timedelta(days=KEEP - 1))
    with factory() as session:
        assert digest_content(session, copy).items == shown[old[0]]
    _deliver(factory, START + timedelta(days=KEEP - 1))
    report = remove_expired(factory, cfg, now=START + timedelta(days=KEEP + 1), pause=0)
    assert report.digests == len(old)  # the resend was planned later: it stays, showing nothing
    with factory() as session:
        assert [digest_content(session, d).items for d in recent] == [shown[d] for d in recent]
        assert session.get(Digest, copy).resend_of_id is None
    for gone in (old[0], copy):
        with pytest.raises(DigestNotFound, match=r"planned before 2026-01-06 are no longer kept: database.keep_days"):
            resend(factory, cfg, gone, now=START + timedelta(days=KEEP + 1))


def test_unsettled_digests_and_originals_of_pending_resends_stay(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    cfg = _settings(tmp_path)
    first = _one_day(factory, cfg, 0)
    with transaction(factory) as session:  # one still failing over, one resent and on its way
        session.execute(update(Digest).where(Digest.id == first[0]).values(state="retry_wait"))
    resend(factory, cfg, first[1], now=START + timedelta(days=1))
    report = remove_expired(factory, cfg, now=START + timedelta(days=KEEP + 5), pause=0)
    with factory() as session:
        left = set(session.scalars(select(Digest.id)))
    assert report.digests == 1 and {first[0], first[1]} <= left and first[2] not in left


def test_bodies_other_digests_show_stay_and_old_appearances_go(factory: sessionmaker[Session], tmp_path: Path) -> None:
    cfg = _settings(tmp_path)
    _one_day(factory, cfg, 0)
    with factory() as session:
        bodies = set(session.scalars(select(Digest.body_key)))
        entries = {e.id: e.summary_source_id for e in session.scalars(select(Entry))}
    assert len(bodies) == 1  # three readers of one filter: one body
    with transaction(factory) as session:  # a manual send of the same body, planned later
        session.execute(update(Digest).where(Digest.subscriber_id == 1).values(planned_at=START + timedelta(days=40)))
    later = START + timedelta(days=20)
    text = dump_text(6, seed=0, start=0)  # the same papers again, from a newer source
    ingest_bytes(factory, text.encode(), name="again", now=later, rules=RULES)
    remove_expired(factory, cfg, now=START + timedelta(days=KEEP + 1), pause=0)
    with factory() as session:
        assert set(session.scalars(select(BodyItem.body_key).distinct())) == bodies
        kept = set(session.execute(select(AppearanceRow.entry_id, AppearanceRow.source_id)))
        assert session.scalar(select(func.count()).select_from(Source)) == 2  # a file's memory stays
    assert {(e, s) for e, s in entries.items()} <= kept  # the variants the kept body pins
    remove_expired(factory, cfg, now=START + timedelta(days=KEEP + 41), pause=0)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(BodyItem)) == 0
        assert session.scalar(select(func.count()).select_from(Digest)) == 0
        pinned = session.execute(select(Entry.id, Entry.summary_source_id)).all()
        kept = set(session.execute(select(AppearanceRow.entry_id, AppearanceRow.source_id)))
    assert set(pinned) == kept  # only each entry's current summary variant is still read


def test_batches_and_a_stop_leave_a_consistent_store(factory: sessionmaker[Session], tmp_path: Path) -> None:
    cfg = _settings(tmp_path)
    for day in (0, 1, 2):
        _one_day(factory, cfg, day, readers=4)
    later = START + timedelta(days=KEEP + 3)
    stops = iter([False, False, True])
    report = remove_expired(factory, cfg, now=later, batch=2, pause=0, stopped=lambda: next(stops, True))
    assert (report.digests, report.finished) == (4, False)
    report = remove_expired(factory, cfg, now=later, batch=5, pause=0)
    assert (report.digests, report.finished) == (8, True)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(claims())) == 0
        assert session.scalar(select(func.count()).select_from(BodyItem)) == 0
        assert removed(session).digests == 12


def test_revisions_told_before_the_kept_days_are_forgotten_with_their_digests(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """When a revision was told (``revision_notices``) goes with the digests that
    carried the entry; one told within ``keep_days`` stays."""
    from bot.store.revisions import write_told
    from bot.store.schema import RevisionNotice

    cfg = _settings(tmp_path)
    first = _one_day(factory, cfg, 0)
    later = _one_day(factory, cfg, KEEP)
    with transaction(factory) as session:
        old = [(sid, eid) for sid, eid, did in session.execute(select(claims())) if did == first[0]][:2]
        new = [(sid, eid) for sid, eid, did in session.execute(select(claims())) if did == later[0]][:1]
        write_told(session, {}, old, START + timedelta(days=1))
        write_told(session, {}, new, START + timedelta(days=KEEP, hours=1))
    remove_expired(factory, cfg, now=START + timedelta(days=KEEP + 3), pause=0)
    with factory() as session:
        kept = [(n.subscriber_id, n.entry_id) for n in session.scalars(select(RevisionNotice))]
    assert len(old) == 2 and kept == new


def test_purge_and_retention_compose(factory: sessionmaker[Session], tmp_path: Path) -> None:
    cfg = _settings(tmp_path)
    _one_day(factory, cfg, 0)
    with transaction(factory) as session:  # r0's own filter: a body only they were shown
        session.execute(update(Digest).where(Digest.subscriber_id == 1).values(body_key="own"))
        session.execute(
            BodyItem.__table__.insert().from_select(
                [c.name for c in BodyItem.__table__.c],
                select(*[func.coalesce(None, "own") if c.name == "body_key" else c for c in BodyItem.__table__.c]),
            )
        )
    recent = _one_day(factory, cfg, 40)
    remove(factory, "r0@example.org", purge=True, now=START + timedelta(days=41))
    report = remove_expired(factory, cfg, now=START + timedelta(days=KEEP + 1), pause=0)
    assert report.digests == 2  # r1's and r2's of day 0; r0's went with them
    remove(factory, "r1@example.org", purge=True, now=START + timedelta(days=KEEP + 1))
    with factory() as session:
        keys = set(session.scalars(select(BodyItem.body_key).distinct()))
        shown = set(session.scalars(select(Digest.body_key)))
        left = set(session.scalars(select(Digest.id)))
    assert keys == shown and "own" not in keys and left == set(recent) - {recent[0], recent[1]}


def test_history_stats_and_prune_say_what_is_no_longer_kept(tmp_path: Path) -> None:
    cli = Cli(tmp_path, {"DIGESTBOT_DATABASE__KEEP_DAYS": str(KEEP)})
    cfg = _settings(tmp_path)
    cli("db", "upgrade")
    from bot.store.engine import make_engine, sessions

    engine = make_engine(f"sqlite:///{tmp_path / 'cli.sqlite3'}")
    factory = sessions(engine)
    _one_day(factory, cfg, 0)
    engine.dispose()
    result = cli("db", "prune")
    assert "removed 3 digests planned before" in result.stdout and "(database.keep_days = 60)" in result.stdout
    for command in (("history",), ("stats",)):
        out = cli(*command).stdout
        assert "are no longer kept (database.keep_days = 60): 3 digests removed." in out
    again = json.loads(cli("db", "prune", "--json").stdout)
    assert again["digests"] == 0
    assert cli("resend", "1", code=1).stderr.strip().endswith("are no longer kept: database.keep_days)")


def test_keep_days_is_bounded(tmp_path: Path) -> None:
    for bad in ("59", "0", "x"):
        result = Cli(tmp_path, {"DIGESTBOT_DATABASE__KEEP_DAYS": bad})("db", "prune", code=2)
        assert "database.keep_days" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_scheduler_removes_what_is_no_longer_kept_on_its_own_job(
    engine, factory: sessionmaker[Session], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio
    import logging

    from bot.run.scheduler import Daemon

    cfg = _settings(tmp_path)
    (tmp_path / "var").mkdir(exist_ok=True)
    _one_day(factory, cfg, 0)
    later = START + timedelta(days=KEEP + 1)

    async def work() -> list[str]:
        daemon = Daemon(factory, Parts(cfg, rules=RULES), engine=engine, deliver_jobs=False, clock=lambda: later)
        jobs = [job.id for job in daemon._scheduler(later).get_jobs()]
        assert daemon.leadership.try_acquire()
        with caplog.at_level(logging.INFO):
            await daemon.upkeep.remove_expired()
        daemon.leadership.release()
        return jobs

    assert "retention" in asyncio.run(work())
    assert "removed 3 digests planned before 2026-01-06 12:00 UTC (database.keep_days = 60)" in caplog.text
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(Digest)) == 0
