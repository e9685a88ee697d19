"""`digestbot stats --html`: a picture of the list (``bot.reports``).

The charts are SVG a parser reads whatever the figures (hypothesis), name themselves
and say their totals; the page's figures are the store's, on SQLite and PostgreSQL; the
file is self-contained (no script, no outside reference) and passes the Nu HTML
Checker and axe-core in light and dark, at a phone's width and a desktop's, its tables
of figures opened and closed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from bot.domain.text import one_line
from bot.mail.parts import Parts
from bot.reports.charts import (
    LABEL_GAP,
    LINE_HEIGHT,
    SERIES_CLASSES,
    WIDTH,
    Series,
    bar_chart,
    day_labels,
    line_chart,
    nice_top,
    short_figure,
)
from bot.reports.list_picture import OTHER_SOURCES, gather, page, source_label, source_series, window
from bot.store.engine import make_engine, sessions
from tests.browser import audit, axe_missing, browser_missing, chromium, vnu_errors, vnu_missing
from tests.helpers import Cli
from tests.list_history import FEEDS, STATUSES, fill_history

SVG = "{http://www.w3.org/2000/svg}"
TODAY = date(2026, 11, 27)
NOW = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)


@given(st.integers(min_value=0, max_value=10**12))
def test_the_axis_top_is_round_and_close_above_the_largest_figure(largest: int) -> None:
    top = nice_top(largest)
    assert top >= largest and top % 2 == 0
    assert top <= max(2, 2.5 * largest)
    assert len(short_figure(top)) <= 5 and len(short_figure(top // 2)) <= 5


figures = st.integers(min_value=0, max_value=10**9)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=400).flatmap(
        lambda n: st.lists(st.lists(figures, min_size=n, max_size=n), max_size=6)
    )
)
def test_a_line_chart_is_svg_inside_its_box_named_and_summed(lines: list[list[int]]) -> None:
    days = window(TODAY, len(lines[0]) if lines else 90)
    series = [Series(f"line {n}", tuple(values)) for n, values in enumerate(lines)]
    root = ET.fromstring(line_chart("c", "Title & <more>", days, series))
    assert root.get("role") == "img" and root.get("aria-labelledby") == "c-title c-desc"
    assert root.findtext(f"{SVG}title") == "Title & <more>"
    description = root.findtext(f"{SVG}desc") or ""
    for one in series:
        assert f"\u2068{one.name}\u2069: {sum(one.values):,} in all" in description
    drawn = root.findall(f"{SVG}polyline") + root.findall(f"{SVG}circle")
    assert len(drawn) == len(series)
    for shape in root.findall(f"{SVG}polyline"):
        for point in (shape.get("points") or "").split():
            x, y = map(float, point.split(","))
            assert 0 <= x <= WIDTH and 0 <= y <= LINE_HEIGHT


def test_a_chart_refuses_figures_it_cannot_draw() -> None:
    days = window(TODAY, 3)
    with pytest.raises(ValueError, match="each series needs a figure for each day"):
        line_chart("c", "t", days, [Series("a", (1, 2))])
    with pytest.raises(ValueError, match=f"at most {SERIES_CLASSES} series"):
        line_chart("c", "t", days, [Series(str(n), (1, 2, 3)) for n in range(SERIES_CLASSES + 1)])


@given(st.text(max_size=60))
def test_every_label_is_text_never_markup(label: str) -> None:
    label = "".join(c for c in label if c.isprintable())  # what XML 1.0 can carry at all
    root = ET.fromstring(bar_chart("b", label, [(label, 3, 1), ("other", 0, 9)]))
    assert root.findtext(f"{SVG}title") == label
    assert [t.text for t in root.iter(f"{SVG}text")][0] == (label or None)


@given(st.integers(min_value=1, max_value=400), st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 1, 1)))
def test_day_labels_stand_apart_and_name_the_days_they_stand_at(length: int, last: date) -> None:
    days = window(last, length)
    labels = day_labels(days)
    assert labels and labels[0][0] <= length * LABEL_GAP
    for (a, _), (b, _) in zip(labels, labels[1:], strict=False):
        assert b - a >= length * LABEL_GAP
    for i, text in labels:
        assert text == f"{days[i].day} {days[i]:%b}"


def test_a_source_is_named_on_one_line_whatever_its_stored_path() -> None:
    assert source_label("url", "https://export.arxiv.org/rss/cs.AR/") == "export.arxiv.org/rss/cs.AR"
    assert source_label("url", "http://[::1/feed") == "http://[::1/feed"  # urllib cannot split it
    assert source_label("url", "http://a.example/x\n\x00y") == "a.example/x y"
    assert source_label("url", "\n\t") == "source gone"
    assert source_label("file", "/dumps/../x\n.txt") == "dump folder"
    assert len(source_label("url", "https://h.example/" + "p" * 100)) == 40


sources = st.tuples(
    st.sampled_from(["file", "url", ""]),
    st.one_of(st.text(max_size=30), st.builds(lambda t: f"http://[{t}", st.text(max_size=10))),
)


@given(
    st.dictionaries(
        st.dates(min_value=TODAY - timedelta(days=9), max_value=TODAY),
        st.dictionaries(sources, st.integers(0, 1000), max_size=12),
    )
)
def test_the_sources_chart_keeps_every_entry_in_six_lines_at_most(
    by_day: dict[date, dict[tuple[str, str], int]],
) -> None:
    days = window(TODAY, 10)
    lines = source_series(days, by_day)
    assert len(lines) <= SERIES_CLASSES
    assert sum(sum(s.values) for s in lines) == sum(sum(c.values()) for c in by_day.values())
    labels = {source_label(o, p) for c in by_day.values() for o, p in c}
    assert all(one_line(label) == label for label in labels)  # one line, no control characters
    assert (OTHER_SOURCES in {s.name for s in lines}) == (len(labels) > SERIES_CLASSES)


def test_the_picture_counts_what_the_store_holds(factory: sessionmaker[Session]) -> None:
    written = fill_history(factory, TODAY)
    with factory() as session:
        picture = gather(session, TODAY, keep_days=365, now=NOW)
    assert dict(picture.statuses) == STATUSES
    totals = {s.name: sum(s.values) for chart in picture.charts for s in chart.series}
    assert totals["sent"] == written.sent and totals["failed"] == written.failed
    assert totals["bounced"] == written.bounced and 0 < written.bounced < written.failed
    assert (totals["unsubscribes"], totals["complaints"]) == (written.unsubscribes, written.complaints)
    assert (totals["more"], totals["less"]) == (written.more, written.less)
    ingest = next(c for c in picture.charts if c.key == "ingest")
    assert {s.name: sum(s.values) for s in ingest.series}["dump folder"] == written.entries["file"]
    assert sum(sum(s.values) for s in ingest.series) == sum(written.entries.values())
    assert len(ingest.series) == SERIES_CLASSES and ingest.series[-1].name == OTHER_SOURCES
    sent = next(c for c in picture.charts if c.key == "sent")
    assert sent.rows[0][0] == TODAY and dict((d, v[0]) for d, v in sent.rows) == written.sent_by_day
    html = page(picture)
    assert f"<bdi>sent</bdi>: {written.sent:,}" in html and "&lt;hardware&gt; &amp; &#34;more&#34;" in html
    assert "<hardware>" not in html
    self_contained(html)


def self_contained(html: str) -> None:
    """Nothing the page would fetch or run: it opens the same from a disk or a mail."""
    assert not re.search(r"<script|\son\w+=|\ssrc=|\shref=|url\(|@import|<link|<iframe|<object", html, re.I), html


def test_stats_html_writes_a_page_and_refuses_what_it_cannot(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    written = cli("stats", "--html", "list.html")
    size = (tmp_path / "list.html").stat().st_size
    assert written.stdout == f"wrote list.html ({size:,} bytes): open it in a browser\n"
    html = (tmp_path / "list.html").read_text()
    assert "None in these 90 days." in html and "0 subscribers in the store" in html
    self_contained(html)
    assert cli("stats", "--html", "week.html", "--days", "7").returncode == 0
    assert "The list, 7 days to" in (tmp_path / "week.html").read_text()
    (tmp_path / "folder").mkdir()
    for args, said in [
        (["--html", "a.html", "--json"], "error: --html writes a page and --json prints lines: give one of them\n"),
        (["--html", "folder"], "error: folder: is a folder; name the file to write\n"),
        (["--html", "nowhere/a.html"], "error: nowhere: no such folder\n"),
    ]:
        assert cli("stats", *args, code=2).stderr == said
    assert "--days" in cli("stats", "--html", "a.html", "--days", "6", code=2).stderr
    # A folder no one may make a file in, root included (file modes do not stop root).
    said = cli("stats", "--html", "/proc/list.html", code=1).stderr
    assert said.startswith("error: /proc/list.html: cannot write: ") and said.count("\n") == 1
    assert not (tmp_path / "a.html").exists() and not list(tmp_path.glob(".*.partial"))


@pytest.fixture
def history_page(tmp_path: Path) -> bytes:
    cli = Cli(tmp_path)
    cli("subscribers", "list")  # the store, made as the CLI makes it
    engine = make_engine(f"sqlite:///{tmp_path / 'cli.sqlite3'}")
    fill_history(sessions(engine), datetime.now(UTC).date())
    engine.dispose()
    cli("stats", "--html", "list.html")
    data = (tmp_path / "list.html").read_bytes()
    assert all(feed.split("//")[1][:20] in data.decode() for feed in FEEDS[:1])
    return data


@pytest.mark.skipif(vnu_missing() is not None, reason=vnu_missing() or "")
def test_the_page_is_valid_html(history_page: bytes, tmp_path: Path) -> None:
    assert vnu_errors({"stats --html": history_page}, tmp_path / "checked") == []


@pytest.mark.skipif(
    browser_missing() is not None or axe_missing() is not None, reason=browser_missing() or axe_missing() or ""
)
@pytest.mark.slow
def test_the_page_passes_axe_light_and_dark_at_both_widths(history_page: bytes, tmp_path: Path) -> None:
    (tmp_path / "page.html").write_bytes(history_page)
    with chromium() as driver:
        driver.get((tmp_path / "page.html").as_uri())
        assert driver.title.startswith("The list, ")
        found = audit(driver, "stats --html")
        for summary in driver.find_elements("css selector", "summary"):
            summary.click()  # a person opens each table of figures
        assert all(d.get_property("open") for d in driver.find_elements("css selector", "details"))
        found += audit(driver, "stats --html, figures open")
    assert found == []


def test_a_right_to_left_override_in_a_source_never_turns_the_figures_beside_it() -> None:
    from bot.reports.list_picture import ListPicture, _chart

    days = window(TODAY, 3)
    lines = source_series(days, {TODAY: {("url", "https://evil.example/\u202efeed"): 12}})
    assert lines and "\u202e" in lines[0].name
    picture = ListPicture(days, (("active", 1),), (_chart("ingest", "Entries", "", days, lines),), 30, NOW)
    html = page(picture)
    assert re.search(r"<bdi>[^<]*\u202e[^<]*</bdi>: 12<", html), html
    assert not re.search(r"\u202e[^<\u2069]*: 12", html)
    assert "\u2068evil.example/\u202efeed\u2069: 12 in all" in html


def test_the_page_and_stats_count_a_day_by_one_rule_across_the_date_line(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """At 23:30 UTC, readers in Warsaw and Amsterdam are on tomorrow: `stats` counts their
    digests on that local day, and so does the page (it said "sent: 3" where `stats`
    showed 3 + 2)."""
    import asyncio

    from bot.choose.tagging import load_rules
    from bot.delivery.loop import deliver_now
    from bot.ingest.storing import ingest_file
    from bot.plan import plan
    from bot.store.digests import stats_by_day
    from bot.subscribers.fields import clean_fields
    from bot.subscribers.subscriptions import save
    from bot.tools.sink import Sink, SinkHandler
    from tests.conftest import ROOT, SEEDS
    from tests.helpers import settings_for

    late = datetime(2026, 6, 14, 23, 30, tzinfo=UTC)
    today, tomorrow = late.date(), late.date() + timedelta(days=1)
    rules = load_rules(ROOT / "config" / "tags.toml")
    for path in sorted(SEEDS.glob("*.txt"))[:2]:
        ingest_file(factory, path, now=late - timedelta(hours=2), rules=rules)
    zones = {"a@example.org": "UTC", "b@example.org": "UTC", "c@example.org": "America/New_York"}
    zones |= {"w@example.org": "Europe/Warsaw", "m@example.org": "Europe/Amsterdam"}
    with Sink(SinkHandler()) as sink:
        settings = settings_for(tmp_path, smtp_port=sink.port)
        fields = [clean_fields(email, filter="*", timezone=zone, send_hour=0) for email, zone in zones.items()]
        save(factory, settings, fields, late - timedelta(days=2))
        plan(factory, settings, rules, now=late, all_due=True)
        asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: late))
    with factory() as session:
        counted = {day: figures.get("sent", 0) for day, figures in stats_by_day(session)}
        picture = gather(session, today, days=7, keep_days=365, now=late)
    assert counted == {today: 3, tomorrow: 2}
    sent = next(chart for chart in picture.charts if chart.key == "sent")
    assert picture.days[-1] == tomorrow and dict((day, row[0]) for day, row in sent.rows) == counted
    assert f"<bdi>sent</bdi>: {sum(counted.values()):,}" in page(picture)
