"""A filter's standing ranking (``bot.choose.standing_ranking``, ``bot.plan.standings``).

The pure part against ``select.rank`` and ``select.pick`` for any matches, windows and
exclusions; the planner that uses kept rankings against the planner that ranks every
reader's whole window, digest for digest, over a seeded month with left-overs, on
SQLite and PostgreSQL; and what makes a kept ranking stale: an entry a later source
changed, rule tags made again, a ranking that is not one, a pass earlier than it.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

import bot.plan.standings as standing_module
from bot.choose.candidates import Candidate, pick, rank
from bot.choose.matching import Explanation, Hit
from bot.choose.select import SelectionCache
from bot.choose.standing_ranking import Match, Standing
from bot.choose.tagging import load_rules
from bot.domain import EntryKind, EntryView
from bot.ingest.storing import ingest_bytes, retag_all
from bot.plan import plan
from bot.store.derived_tables import FilterRanking
from bot.store.engine import make_engine, sessions, transaction, upgrade
from bot.store.schema import BodyItem, Digest, SubscriberRow
from bot.store.subscribers import list_subscribers
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save, set_filter
from tests.conftest import ROOT
from tests.helpers import dump_text, entry_view, filter_expressions, render_dump, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
START = datetime(2026, 6, 1, 12, tzinfo=UTC)
BASE = datetime(2026, 5, 1, tzinfo=UTC)

match_rows = st.lists(
    st.tuples(
        st.integers(0, 40),  # first seen, in hours after BASE (ties on purpose)
        st.integers(0, 4),  # score
        st.integers(0, 3),  # hits
        st.integers(0, 3),  # published: 0 unknown, else days after a fixed date
    ),
    max_size=40,
)


def _view(entry_id: int, hours: int, published: int) -> EntryView:
    return entry_view(
        id=entry_id,
        key=f"k{entry_id}",
        kind=EntryKind.PAPER,
        title=f"t{entry_id}",
        authors=(),
        published=date(2026, 4, 1) + timedelta(days=published) if published else None,
        summary="",
        summary_type="text",
        links=(),
        tags=(),
        arxiv_id=None,
        doi=None,
        first_seen_source_id=None,
        first_seen_at=BASE + timedelta(hours=hours),
    )


def _candidates(rows: list[tuple[int, int, int, int]]) -> list[Candidate]:
    return [
        Candidate(
            _view(n + 1, hours, published),
            Explanation(True, tuple(Hit(f"a{h}", "tag (header)", False) for h in range(hits)), score),
        )
        for n, (hours, score, hits, published) in enumerate(rows)
    ]


def _standing(candidates: list[Candidate]) -> Standing:
    return Standing(
        Match.of(c.entry.id, c.entry.first_seen_at, c.entry.content.published, c.explanation) for c in candidates
    )


@settings(max_examples=300, deadline=None)
@given(
    rows=match_rows,
    start_hours=st.none() | st.integers(-1, 42),
    excluded=st.sets(st.integers(1, 45), max_size=20),
    count=st.integers(0, 8),
)
def test_the_one_order_and_pick_are_the_rule_as_written(
    rows: list[tuple[int, int, int, int]], start_hours: int | None, excluded: set[int], count: int
) -> None:
    """The order and the pick every ranking uses, against the rule spelled out here:
    higher score, more matched atoms, newer published, newer first seen, lower id; the
    first *count* of the window not excluded, the rest counted, the oldest of it."""
    candidates = _candidates(rows)
    start = None if start_hours is None else BASE + timedelta(hours=start_hours)

    def rule(c: Candidate) -> tuple[int, int, int, float, int]:
        published = c.entry.content.published
        return (
            -c.explanation.score,
            -len(c.explanation.hits),
            -(published.toordinal() if published else 0),
            -c.entry.first_seen_at.timestamp(),
            c.entry.id,
        )

    ordered = sorted(candidates, key=rule)
    assert [c.entry.id for c in rank(candidates)] == [c.entry.id for c in ordered]
    window = [c for c in ordered if (start is None or c.entry.first_seen_at >= start) and c.entry.id not in excluded]
    rest = window[count:]
    expected = (
        tuple(c.entry.id for c in window[:count]),
        len(rest),
        min((c.entry.first_seen_at for c in rest), default=None),
    )
    got = _standing(candidates).pick(start, frozenset(excluded), count)
    assert (got.chosen, got.left, got.oldest_left) == expected
    # A window's ranking made afresh (its candidates only, in id order) picks the same.
    in_window = sorted(
        (c for c in candidates if start is None or c.entry.first_seen_at >= start), key=lambda c: c.entry.id
    )
    picked = pick(rank(in_window), frozenset(excluded), count)
    assert (tuple(c.entry.id for c in picked.chosen), picked.left, picked.oldest_left) == expected


@settings(max_examples=200, deadline=None)
@given(rows=match_rows, again=st.sets(st.integers(1, 40), max_size=15), new=match_rows, since=st.integers(0, 40))
def test_a_merged_ranking_is_the_ranking_made_afresh(
    rows: list[tuple[int, int, int, int]], again: set[int], new: list[tuple[int, int, int, int]], since: int
) -> None:
    """Entries weighed again (changed, or matching no more) and new ones put in, the old
    ones dropped: the same columns as a ranking made from the result in one go."""
    old = _candidates(rows)
    changed = _candidates(new)
    # The weighed entries: those named in *again* (which may now match differently or
    # not at all) and every new one, with ids above the old ones.
    shift = len(old)
    found = [
        Match(m.entry_id + (shift if m.entry_id > len(again) else 0), m.first_seen_us, m.weight)
        for m in _standing(changed).matches()
    ]
    weighed = again | {m.entry_id for m in found}
    since_us = _standing(_candidates([(since, 0, 0, 0)])).seen[0]
    kept = [m for m in _standing(old).matches() if m.entry_id not in weighed and m.first_seen_us >= since_us]
    afresh = Standing([*kept, *(m for m in found if m.first_seen_us >= since_us)])
    assert _standing(old).merged(weighed, found, since_us) == afresh


@settings(max_examples=200, deadline=None)
@given(rows=match_rows, again=st.sets(st.integers(1, 45), max_size=10), same=st.booleans())
def test_a_ranking_holds_what_was_weighed_again_exactly_when_merging_it_changes_nothing(
    rows: list[tuple[int, int, int, int]], again: set[int], same: bool
) -> None:
    ranking = _standing(_candidates(rows))
    found = [m for m in ranking.matches() if m.entry_id in again]
    if not same and found:
        found[0] = Match(found[0].entry_id, found[0].first_seen_us, found[0].weight + 1)
    unchanged = ranking.merged(again, found, -(2**62)) == ranking
    assert ranking.holds(found, again) is unchanged


@given(rows=match_rows)
def test_a_ranking_reads_back_as_written(rows: list[tuple[int, int, int, int]]) -> None:
    ranking = _standing(_candidates(rows))
    assert Standing.decode(ranking.encode()) == ranking


@given(st.binary(max_size=300))
def test_bytes_that_are_not_a_ranking_read_as_none_or_a_ranking(data: bytes) -> None:
    found = Standing.decode(data)
    assert found is None or isinstance(found, Standing)
    assert Standing.decode(b"SR2" + (5).to_bytes(8, "little") + b"\x00" * 7) is None


# --- the planner ----------------------------------------------------------------

FILTERS = ["*", *filter_expressions(30)[1:6], '"sparse attention" or llm', "Spiking: snn; Serving: llm and serving"]


def _planned(factory: sessionmaker[Session], since: datetime) -> list[tuple[Any, ...]]:
    """What the passes since *since* planned: per digest its reader, day, state, pending
    count and items (entry, why, tags, url, section); then every reader's watermark."""
    with factory() as session:
        rows = session.execute(
            select(Digest.subscriber_id, Digest.local_date, Digest.state, Digest.pending_count, Digest.body_key)
            .where(Digest.planned_at >= since)
            .order_by(Digest.subscriber_id, Digest.local_date)
        ).all()
        items: dict[str, list[tuple[Any, ...]]] = {}
        for key, entry_id, why, tags, url, section in session.execute(
            select(BodyItem.body_key, BodyItem.entry_id, BodyItem.why, BodyItem.tags, BodyItem.url, BodyItem.section)
            .where(BodyItem.body_key.in_([r[4] for r in rows if r[4]]))
            .order_by(BodyItem.body_key, BodyItem.position)
        ):
            items.setdefault(key, []).append((entry_id, why, tuple(tags), url, section))
        marks = session.execute(
            select(SubscriberRow.id, SubscriberRow.planned_through, SubscriberRow.planned_key).order_by(
                SubscriberRow.id
            )
        ).all()
    return [(*r[:4], tuple(items.get(r[4] or "", ()))) for r in rows] + [tuple(m) for m in marks]


def _relisted(factory: sessionmaker[Session], first: int, count: int) -> str:
    """A later source listing stored entries again with a summary that names sparse
    attention and a header tag: their text and tags change, as a revision's would."""
    from bot.store.schema import Entry

    with factory() as session:
        rows = session.execute(
            select(Entry.title, Entry.authors, Entry.published).where(Entry.kind == "paper").order_by(Entry.id)
        ).all()[first : first + count]
    papers = [(t, list(a), p, "We study sparse attention for long contexts, again.") for t, a, p in rows]
    return render_dump(papers, header=["LLM"])


def test_kept_rankings_plan_what_whole_windows_plan_digest_for_digest(
    factory: sessionmaker[Session], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stores fed the same days (new readers, a changed filter, entries a later
    source changed, rule tags made again, a kept ranking gone bad): one planned with
    kept rankings, one planned with every reader's window ranked whole; after every
    pass both hold the same digests, items and watermarks, and most readers were
    planned from kept rankings."""
    reference = sessions(_sqlite_store(tmp_path / "reference.sqlite3"))
    cfg = settings_for(tmp_path, digest={"max_entries": 4, "max_age_days": 8})
    kept_way = standing_module.Standings.choose
    served: list[int] = []

    def counted(self: standing_module.Standings, session: Session, readers: Any) -> Any:
        found = kept_way(self, session, readers)
        served.append(len(found))
        return found

    stores = (factory, reference)
    readers = [clean_fields(f"r{n}@example.org", filter=FILTERS[n % len(FILTERS)]) for n in range(18)]
    for store in stores:
        save(store, cfg, readers, START - timedelta(days=1))
    kept = SelectionCache()  # the daemon keeps one from pass to pass
    now = START
    for day in range(14):
        dump = dump_text(25, seed=day, start=day * 100).encode()
        relisted = _relisted(factory, 5, 12).encode() if day == 7 else b""
        for store in stores:
            ingest_bytes(store, dump, name=f"day-{day}", now=now - timedelta(hours=1), rules=RULES)
            if day == 4:
                late = [clean_fields("late@example.org", filter="*", backfill="3d")]
                save(store, cfg, late, now - timedelta(hours=2))
            if day == 6:
                set_filter(store, cfg, _reader(store, "r2@example.org"), "llm or snn", now - timedelta(hours=2))
            if day == 7:
                ingest_bytes(store, relisted, name="again", now=now - timedelta(minutes=30), rules=RULES)
            if day == 9:  # tags.toml lost a rule and `tags apply` ran; this daemon has not reloaded yet
                retag_all(store, _without_rule(tmp_path, "llm"))
        if day == 11:
            with transaction(factory) as session:
                session.execute(update(FilterRanking).values(body=b"not a ranking"))
            kept = SelectionCache()  # and the daemon restarted
        monkeypatch.setattr(standing_module.Standings, "choose", counted)
        plan(factory, cfg, RULES, now=now, all_due=True, cache=kept)
        monkeypatch.setattr(standing_module.Standings, "choose", lambda self, session, readers: {})
        plan(reference, cfg, RULES, now=now, all_due=True)
        monkeypatch.undo()
        assert _planned(factory, now) == _planned(reference, now), f"day {day}"
        now += timedelta(days=1)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(FilterRanking)) >= len(FILTERS) - 1
    assert sum(served) >= 14 * 18 * 0.8, served  # the kept rankings did the planning
    # The daemon forgets verdicts and entries no ranking reaches: its memory stays a span's.
    floor = standing_module.span_start(now - timedelta(days=1), cfg.digest.max_age_days)
    memory = standing_module.memory_of(kept)
    assert kept.seen_at and min(kept.seen_at.values()) >= floor
    assert all(view.first_seen_at >= floor for view in memory.views.values())


def _without_rule(folder: Path, name: str) -> Any:
    text = (ROOT / "config" / "tags.toml").read_text(encoding="utf-8")
    head, _, rest = text.partition(f"\n[{name}]\n")
    path = folder / "fewer-tags.toml"
    path.write_text(head + "\n" + rest[rest.index("\n[") :], encoding="utf-8")
    return load_rules(path)


def _sqlite_store(path: Path) -> Any:
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    return engine


def _reader(factory: sessionmaker[Session], email: str) -> Any:
    with factory() as session:
        return next(s for s in list_subscribers(session) if s.email == email)


def test_a_pass_earlier_than_a_kept_ranking_plans_the_long_way(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """A preview or a replayed clock before the last pass: the kept ranking holds entries
    that pass cannot see, so it is neither used nor overwritten."""
    cfg = settings_for(tmp_path)
    save(factory, cfg, [clean_fields("ada@example.org", filter="*")], START - timedelta(days=3))
    ingest_bytes(factory, dump_text(10, seed=1).encode(), name="a", now=START - timedelta(hours=1), rules=RULES)
    plan(factory, cfg, RULES, now=START, all_due=True)
    with factory() as session:
        made = session.execute(select(FilterRanking.ranking_key, FilterRanking.weighed_to)).all()
    assert made and all(at == START for _, at in made)
    earlier = plan(factory, cfg, RULES, now=START - timedelta(minutes=10), all_due=True)
    assert len(earlier.planned) == 0  # nothing new for ada, and no crash
    with factory() as session:
        assert session.execute(select(FilterRanking.ranking_key, FilterRanking.weighed_to)).all() == made


def test_retention_forgets_the_rankings_of_filters_no_reader_has(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """A ranking is written again at least once a day while a pass uses it; one no pass
    has brought up to date for a span is a filter nobody reads, and retention drops it."""
    from bot.plan.retention import remove_expired
    from bot.subscribers.subscriptions import set_filter

    cfg = settings_for(tmp_path, digest={"max_age_days": 3})
    save(
        factory, cfg, [clean_fields("ada@example.org", filter="llm"), clean_fields("bo@example.org", filter="*")], START
    )
    now = START + timedelta(hours=1)
    for day in range(8):
        ingest_bytes(factory, dump_text(5, seed=day, start=day * 10).encode(), name=f"d{day}", now=now, rules=RULES)
        if day == 1:  # from now on nobody reads "llm"
            set_filter(factory, cfg, _reader(factory, "ada@example.org"), "*", now)
        plan(factory, cfg, RULES, now=now + timedelta(hours=1), all_due=True)
        remove_expired(factory, cfg, now=now + timedelta(hours=1), pause=0)
        now += timedelta(days=1)
    with factory() as session:
        kept = set(session.scalars(select(FilterRanking.ranking_key)))
    assert kept == {standing_module.ranking_key("*", RULES)}
