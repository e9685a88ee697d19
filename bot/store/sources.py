"""Source rows (one per dump file or fetched feed document) and feed validators."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot.domain import FileStamp, SourceStatus
from bot.domain.text import path_text
from bot.store.bulk import chunks
from bot.store.row_shapes import RowShape
from bot.store.schema import Entry, Feed, Source


@dataclass(frozen=True, slots=True)
class SourceView:
    id: int
    origin: str
    path: str
    sha256: str
    size: int
    format: str | None
    status: SourceStatus
    error: str | None
    entries: int
    new: int
    updated: int
    duplicate_of: int | None
    ingested_at: datetime


SOURCE = RowShape(
    SourceView,
    columns={
        "entries": "entries_count",
        "new": "new_count",
        "updated": "updated_count",
        "duplicate_of": "duplicate_of_id",
    },
)


def ingested_with_sha(session: Session, sha256: str) -> int | None:
    return session.scalar(
        select(Source.id).where(Source.sha256 == sha256, Source.status == SourceStatus.INGESTED.value)
    )


def add_source(
    session: Session,
    *,
    origin: str,
    path: str,
    sha256: str,
    size: int,
    mtime_ns: int | None,
    status: SourceStatus,
    now: datetime,
    format: str | None = None,
    error: str | None = None,
    duplicate_of: int | None = None,
) -> int:
    source = Source(
        origin=origin,
        path=path,
        sha256=sha256,
        size=size,
        mtime_ns=mtime_ns,
        format=format,
        status=status.value,
        error=error,
        entries_count=0,
        new_count=0,
        updated_count=0,
        duplicate_of_id=duplicate_of,
        ingested_at=now,
    )
    session.add(source)
    session.flush()
    return source.id


def set_counts(session: Session, source_id: int, *, entries: int, new: int, updated: int) -> None:
    source = session.get_one(Source, source_id)
    source.entries_count, source.new_count, source.updated_count = entries, new, updated


def seen_stamps(session: Session, stamps: Iterable[FileStamp]) -> set[FileStamp]:
    """Which of *stamps* (path, size, mtime) already have a source row, any status."""
    wanted: dict[tuple[str, int, int | None], FileStamp] = {(path_text(s.path), s.size, s.mtime_ns): s for s in stamps}
    seen: set[FileStamp] = set()
    paths = sorted({p for p, _, _ in wanted})
    for part in chunks(paths):
        rows = session.execute(
            select(Source.path, Source.size, Source.mtime_ns).where(Source.origin == "file", Source.path.in_(part))
        )
        for row in rows:
            stamp = wanted.get((row.path, row.size, row.mtime_ns))
            if stamp is not None:
                seen.add(stamp)
    return seen


def list_sources(session: Session, *, status: SourceStatus | None = None) -> list[SourceView]:
    query = select(Source).order_by(Source.id)
    if status is not None:
        query = query.where(Source.status == status.value)
    return [SOURCE.of(s) for s in session.scalars(query)]


@dataclass(frozen=True, slots=True)
class FeedState:
    url: str
    etag: str | None
    last_modified: str | None


FEED = RowShape(FeedState)


def feed_state(session: Session, url: str) -> FeedState:
    feed = session.scalars(select(Feed).where(Feed.url == url)).first()
    return FeedState(url, None, None) if feed is None else FEED.of(feed)


def save_feed_state(
    session: Session, url: str, *, etag: str | None, last_modified: str | None, error: str | None, now: datetime
) -> None:
    feed = session.scalars(select(Feed).where(Feed.url == url)).first()
    if feed is None:
        feed = Feed(url=url)
        session.add(feed)
    if error is None:
        feed.etag, feed.last_modified = etag, last_modified
    feed.last_error = error
    feed.last_fetched_at = now


def latest_dump_at(session: Session) -> datetime | None:
    """When the newest source that brought new entries was ingested."""
    return session.scalar(
        select(func.max(Source.ingested_at)).where(Source.status == SourceStatus.INGESTED.value, Source.new_count > 0)
    )


def entries_by_day_and_source(session: Session, since: datetime) -> dict[date, dict[tuple[str, str], int]]:
    """Entries first seen each UTC day from *since* on, by the (origin, path) of the
    source they first came in: a dump file, a feed's URL (("", "") when it is gone)."""
    rows = session.execute(
        select(Entry.first_seen_at, Source.origin, Source.path)
        .outerjoin(Source, Source.id == Entry.first_seen_source_id)
        .where(Entry.first_seen_at >= since)
    )
    days: dict[date, dict[tuple[str, str], int]] = {}
    for at, origin, path in rows:
        counts = days.setdefault(at.date(), {})
        key = (origin or "", path or "")
        counts[key] = counts.get(key, 0) + 1
    return days
