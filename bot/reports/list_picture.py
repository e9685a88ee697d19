"""Report stage: a picture of the list, one self-contained HTML page.

Gathers, over the last days (90 by default), what the store says about the list:
subscribers by status now, digests sent, failed and bounced a day, unsubscribes and
complaints a day, readers' ratings a day and entries ingested a day by source; and
lays them out as static SVG charts (``bot.reports.charts``) with their figures in
tables, styled for light and dark, with no script and no outside reference.  Reads
the store through its queries; never writes it, never sends, never writes a file
(the CLI does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from bot.domain import ReturnKind, SubscriberStatus
from bot.domain.text import one_line
from bot.reports.charts import SERIES_CLASSES, Series, bar_chart, line_chart
from bot.shipped import TEMPLATES, shipped

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

DEFAULT_DAYS = 90
MAX_DAYS = 366
# A feed's URL is shown this long at most (the whole of it in the figures' table title).
SOURCE_LABEL = 40
DUMP_FOLDER = "dump folder"
UNKNOWN_SOURCE = "source gone"
OTHER_SOURCES = "other sources"
# Each status in a colour of its own meaning (the page's s1 .. s6): blue the readers who
# get digests, red the ones mail cannot reach, grey the ones not yet confirmed.
STATUS_COLOURS = {"active": 1, "bounced": 2, "paused": 3, "unsubscribed": 5, "pending": 6}


@dataclass(frozen=True, slots=True)
class Chart:
    """One figure of the page: its chart, and the figures it draws, day by day."""

    key: str
    title: str
    note: str
    svg: str
    series: tuple[Series, ...]
    rows: tuple[tuple[date, tuple[int, ...]], ...]  # the days with a figure, newest first


@dataclass(frozen=True, slots=True)
class ListPicture:
    days: tuple[date, ...]
    statuses: tuple[tuple[str, int], ...]
    charts: tuple[Chart, ...]
    keep_days: int
    written_at: datetime


def window(today: date, days: int) -> tuple[date, ...]:
    """The *days* days that end with *today*, oldest first."""
    return tuple(today - timedelta(days=n) for n in range(days - 1, -1, -1))


def daily(days: Sequence[date], counts: Mapping[date, int]) -> tuple[int, ...]:
    return tuple(counts.get(day, 0) for day in days)


def source_label(origin: str, path: str) -> str:
    """What the page calls a source: every dump file is the dump folder's; a feed is its
    host and path, shortened."""
    if origin == "file":
        return DUMP_FOLDER
    if not path:
        return UNKNOWN_SOURCE
    try:
        parts = urlsplit(path)
        label = f"{parts.hostname or ''}{parts.path}".rstrip("/") or path
    except ValueError:  # a stored URL urllib cannot split ("http://[::1"): shown as it is
        label = path
    label = one_line(label) or UNKNOWN_SOURCE
    return label if len(label) <= SOURCE_LABEL else label[: SOURCE_LABEL - 1] + "…"


def source_series(days: Sequence[date], by_day: Mapping[date, Mapping[tuple[str, str], int]]) -> tuple[Series, ...]:
    """A line per source (as ``source_label`` names them), the largest first; past the
    chart's room the smallest are summed as "other sources"."""
    per_label: dict[str, dict[date, int]] = {}
    for day, counts in by_day.items():
        for (origin, path), count in counts.items():
            line = per_label.setdefault(source_label(origin, path), {})
            line[day] = line.get(day, 0) + count
    ranked = sorted(per_label.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    if len(ranked) > SERIES_CLASSES:
        kept, rest = ranked[: SERIES_CLASSES - 1], ranked[SERIES_CLASSES - 1 :]
        other: dict[date, int] = {}
        for _, line in rest:
            for day, count in line.items():
                other[day] = other.get(day, 0) + count
        ranked = [*kept, (OTHER_SOURCES, other)]
    return tuple(Series(label, daily(days, line)) for label, line in ranked)


def figure_rows(days: Sequence[date], series: Sequence[Series]) -> tuple[tuple[date, tuple[int, ...]], ...]:
    """Each day that has a figure other than 0, newest first, with each series' figure."""
    rows = ((day, tuple(s.values[i] for s in series)) for i, day in enumerate(days))
    return tuple(row for row in reversed(list(rows)) if any(row[1]))


def _chart(key: str, title: str, note: str, days: Sequence[date], series: Sequence[Series]) -> Chart:
    drawn = line_chart(key, title, days, series)
    return Chart(key, title, note, drawn, tuple(series), figure_rows(days, series))


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """What the store counts, day by day, for the picture (``gather`` reads them)."""

    statuses: Mapping[SubscriberStatus, int]
    digests: Mapping[date, Mapping[str, int]]  # by state, as ``digestbot stats`` counts them
    bounced: Mapping[date, int]
    returned: Mapping[date, Mapping[str, int]]  # by ReturnKind
    unsubscribes: Mapping[date, int]
    ratings: Mapping[date, Mapping[str, int]]  # by verdict
    ingested: Mapping[date, Mapping[tuple[str, str], int]]  # by (origin, path)


def gather(session: Session, today: date, *, days: int = DEFAULT_DAYS, keep_days: int, now: datetime) -> ListPicture:
    """What the store says about the *days* days that end with *today* (UTC), or with the
    newest local day a digest was planned for when that is later: digests are counted
    by their readers' local days, as ``digestbot stats`` counts them, and a reader east
    of UTC is already on tomorrow."""
    from bot.store.consents import consents_by_day
    from bot.store.digests import bounced_by_day, stats_by_day
    from bot.store.feedback import ratings_by_day
    from bot.store.returns import returns_by_day
    from bot.store.sources import entries_by_day_and_source
    from bot.store.subscribers import count_by_status

    digests = dict(stats_by_day(session))
    run = window(last_day(today, digests), days)
    since = datetime.combine(run[0], time(), tzinfo=UTC)
    figures = StoreFigures(
        statuses=count_by_status(session),
        digests=digests,
        bounced=bounced_by_day(session),
        returned=returns_by_day(session, since),
        unsubscribes=consents_by_day(session, "unsubscribe", since),
        ratings=ratings_by_day(session, since),
        ingested=entries_by_day_and_source(session, since),
    )
    shown = tuple((status.value, figures.statuses.get(status, 0)) for status in SubscriberStatus)
    return ListPicture(run, shown, draw(run, figures), keep_days, now)


def last_day(today: date, digests: Mapping[date, object]) -> date:
    """The page's last day: *today* (UTC), or a reader's local day already begun east of
    UTC (a day later at most: a digest is planned on its own day, never ahead)."""
    return max([today, *(day for day in digests if day <= today + timedelta(days=1))])


def _one(by_day: Mapping[date, Mapping[str, int]], name: str) -> dict[date, int]:
    return {day: counts.get(name, 0) for day, counts in by_day.items()}


def draw(run: Sequence[date], figures: StoreFigures) -> tuple[Chart, ...]:
    """The page's charts of *figures* over the days *run*."""
    return (
        _chart(
            "sent",
            "Digests sent a day",
            "By the reader's own day. A failed digest whose resend was delivered counts as sent.",
            run,
            [Series("sent", daily(run, _one(figures.digests, "sent")), 1)],
        ),
        _chart(
            "failed",
            "Digests failed and bounced a day",
            "Failed: refused, or given up on after the retries. Bounced: the failed ones of readers now "
            "marked bounced, who get nothing until they are resumed.",
            run,
            [
                Series("failed", daily(run, _one(figures.digests, "failed")), 2),
                Series("bounced", daily(run, figures.bounced), 3),
            ],
        ),
        _chart(
            "leaving",
            "Unsubscribes and complaints a day",
            "Unsubscribes by every route (a link, the manage page, a mail, the operator); "
            "complaints read from the inbox, each of which also unsubscribes its reader.",
            run,
            [
                Series("unsubscribes", daily(run, figures.unsubscribes), 5),
                Series("complaints", daily(run, _one(figures.returned, ReturnKind.COMPLAINT.value)), 2),
            ],
        ),
        _chart(
            "ratings",
            "Readers' ratings a day",
            '"More like this" and "Less like this" as they stand: a rating taken back is not counted.',
            run,
            [
                Series("more", daily(run, _one(figures.ratings, "more")), 4),
                Series("less", daily(run, _one(figures.ratings, "less")), 2),
            ],
        ),
        _chart(
            "ingest",
            "Entries ingested a day, by source",
            "New entries by the day they were first seen and the dump or feed they came in.",
            run,
            source_series(run, figures.ingested),
        ),
    )


def page(picture: ListPicture) -> str:
    """The page: one HTML document, its style inline, no script, no outside reference."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape
    from markupsafe import Markup

    env = Environment(
        loader=FileSystemLoader(str(shipped(TEMPLATES) / "report")),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    bars = [(status, count, STATUS_COLOURS.get(status, SERIES_CLASSES)) for status, count in picture.statuses]
    status_chart = bar_chart("statuses", "Subscribers by status, now", bars)
    return env.get_template("list.html.j2").render(
        picture=picture,
        status_chart=Markup(status_chart),  # noqa: S704 - drawn by bot.reports.charts, which escapes every label
        charts=[(chart, Markup(chart.svg)) for chart in picture.charts],  # noqa: S704 - as above
        total=sum(count for _, count in picture.statuses),
    )
