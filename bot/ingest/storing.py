"""Ingest service: one source (file bytes or a fetched document) into the store.

Parses outside the database transaction, then records the source and its
entries in one transaction, so a bad or half-processed source never changes
what is already stored.  Never renders, plans or sends anything.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import TagRules
from bot.config import WatchConfig
from bot.domain import IngestResult, ParsedSource, SourceStatus
from bot.domain.text import is_utf8_name, path_text
from bot.ingest.formats import SourceFormatError, parse_any
from bot.ingest.upsert import upsert_source_entries
from bot.store.engine import transaction
from bot.store.entries import refresh_statistics, set_rule_tags
from bot.store.entry_reads import entry_texts
from bot.store.facts import RETAGGED_AT, set_fact
from bot.store.sources import add_source, ingested_with_sha, set_counts

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


@contextmanager
def garbage_collection_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector while one source is parsed and stored.

    A 10,000-entry dump allocates a few hundred thousand containers that all
    stay alive until the transaction ends, so every collection in between
    re-scans them (and the whole process) and frees nothing (bench/README.md,
    ingest, has what that cost).  Reference counting still
    frees everything else, collections resume on the way out, and memory
    stays bounded by ``watch.max_file_bytes``.  Nested or concurrent uses only
    ever re-enable a collector they found enabled.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def ingest_bytes(
    factory: sessionmaker[Session],
    data: bytes,
    *,
    name: str,
    origin: str = "file",
    mtime_ns: int | None = None,
    now: datetime | None = None,
    rules: TagRules | None = None,
) -> IngestResult:
    """Ingest one document; identical bytes already ingested make a ``duplicate``.
    *rules* tag new and changed entries (``None``: no rule tags)."""
    now = now or utcnow()
    with garbage_collection_paused():
        return _ingest(factory, data, name=name, origin=origin, mtime_ns=mtime_ns, now=now, rules=rules)


def _ingest(
    factory: sessionmaker[Session],
    data: bytes,
    *,
    name: str,
    origin: str,
    mtime_ns: int | None,
    now: datetime,
    rules: TagRules | None,
) -> IngestResult:
    sha256 = hashlib.sha256(data).hexdigest()
    parsed: ParsedSource | None = None
    error: str | None = None
    try:
        parsed = parse_any(data, name)
        for skipped in parsed.skipped:
            log.warning("%s", skipped)
    except SourceFormatError as exc:
        error = str(exc)
        if exc.__cause__ is not None:  # a library's exception: its traceback for a developer (-vv)
            log.debug("reading %s failed", name, exc_info=exc.__cause__)
    common: dict[str, Any] = {
        "origin": origin,
        "path": name,
        "sha256": sha256,
        "size": len(data),
        "mtime_ns": mtime_ns,
        "now": now,
    }
    for attempt in (1, 2):
        try:
            with transaction(factory) as session:
                result = _record(session, parsed, error, common, rules)
            break
        except IntegrityError:
            # Another process ingested the same bytes between our check and
            # insert; the second pass sees its row and records a duplicate.
            if attempt == 2:
                raise
        except Exception as exc:  # a bug must not stop the files after this one
            log.exception("ingest of %s failed unexpectedly", name)
            with transaction(factory) as session:
                source_id = add_source(
                    session, status=SourceStatus.FAILED, error=f"{name}: internal error: {type(exc).__name__}", **common
                )
            reason = " ".join(str(exc).split())[:300]
            error = f"{name}: internal error: {type(exc).__name__}: {reason}"
            return IngestResult(name, SourceStatus.FAILED, source_id, error=error)
    _refresh_statistics(factory, result.new)
    return result


def _refresh_statistics(factory: sessionmaker[Session], new_entries: int) -> None:
    """After the commit, in a transaction of its own: the source is stored whatever happens
    here.  (A plain session: on SQLite nothing is executed, so no write lock is taken.)"""
    try:
        with factory() as session:
            if refresh_statistics(session, new_entries):
                session.commit()
    except SQLAlchemyError as exc:  # slower look-ups until autovacuum catches up, nothing lost
        log.warning("could not refresh the store's statistics: %s", " ".join(str(exc).split())[:300])


def _record(
    session: Session, parsed: ParsedSource | None, error: str | None, common: dict[str, Any], rules: TagRules | None
) -> IngestResult:
    name = common["path"]
    original = ingested_with_sha(session, common["sha256"])
    if original is not None:
        source_id = add_source(session, status=SourceStatus.DUPLICATE, duplicate_of=original, **common)
        return IngestResult(name, SourceStatus.DUPLICATE, source_id, duplicate_of=original)
    if parsed is None:
        source_id = add_source(session, status=SourceStatus.FAILED, error=error, **common)
        return IngestResult(name, SourceStatus.FAILED, source_id, error=error)
    source_id = add_source(session, status=SourceStatus.INGESTED, format=parsed.format, **common)
    counts = upsert_source_entries(session, source_id, parsed, common["now"], rules)
    set_counts(session, source_id, entries=counts.entries, new=counts.new, updated=counts.updated)
    return IngestResult(name, SourceStatus.INGESTED, source_id, counts.entries, counts.new, counts.updated)


DEFAULT_MAX_FILE_BYTES = WatchConfig().max_file_bytes


def ingest_file(
    factory: sessionmaker[Session],
    path: Path,
    *,
    now: datetime | None = None,
    rules: TagRules | None = None,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    follow_links: bool = True,
) -> IngestResult:
    """Ingest one file by path; an unreadable or oversized file, or one whose name is
    not UTF-8, is recorded as failed too (without reading it), so the watcher does not
    retry it until it changes.  Names are stored and shown escaped (``path_text``).
    Without *follow_links* (the watcher) a path that has become a link is not read."""
    try:
        path = path.resolve() if follow_links else path.absolute()
    except (OSError, RuntimeError) as exc:  # Python 3.11 raises RuntimeError for a symlink loop
        shown = path_text(path)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "symlink loop"
        return IngestResult(shown, SourceStatus.FAILED, error=f"{shown}: cannot resolve: {reason}")
    name = path_text(path)
    too_big = f"{name}: more than watch.max_file_bytes ({max_bytes / 1e6:.1f} MB); split the dump or raise the limit"
    try:
        # O_NOFOLLOW: the path is no link (resolved, or seen as a regular file by the
        # watcher), unless one was put there since; O_NONBLOCK: nor may a FIFO put
        # there since hang the open.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):  # a device or FIFO would never end
                return IngestResult(name, SourceStatus.FAILED, error=f"{name}: not a regular file")
            if not is_utf8_name(path):
                not_utf8 = f"{name}: file name is not UTF-8; rename the file"
                return _record_unread(factory, name, st.st_size, st.st_mtime_ns, not_utf8, now)
            if st.st_size > max_bytes:
                return _record_unread(factory, name, st.st_size, st.st_mtime_ns, too_big, now)
            data = handle.read(max_bytes + 1)  # the file may grow after the stat
        if len(data) > max_bytes:
            return _record_unread(factory, name, len(data), st.st_mtime_ns, too_big, now)
    except OSError as exc:
        error = f"{name}: cannot read: {exc.strerror or exc}"
        if not path.exists():
            return IngestResult(name, SourceStatus.FAILED, error=error)
        return _record_unread(factory, name, 0, None, error, now)
    return ingest_bytes(factory, data, name=name, origin="file", mtime_ns=st.st_mtime_ns, now=now, rules=rules)


def _record_unread(
    factory: sessionmaker[Session], name: str, size: int, mtime_ns: int | None, error: str, now: datetime | None
) -> IngestResult:
    with transaction(factory) as session:
        source_id = add_source(
            session,
            origin="file",
            path=name,
            sha256="",
            size=size,
            mtime_ns=mtime_ns,
            status=SourceStatus.FAILED,
            error=error,
            now=now or utcnow(),
        )
    return IngestResult(name, SourceStatus.FAILED, source_id, error=error)


def retag_all(
    factory: sessionmaker[Session], rules: TagRules, *, batch: int = 5000, progress: Callable[[int], None] | None = None
) -> int:
    """Recompute the rule tags of every stored entry (after ``tags.toml`` changed),
    one transaction per batch; returns the number of entries re-tagged.  The store's
    ``RETAGGED_AT`` fact changes before and after, so a filter's standing ranking made
    from tags of before (or of halfway through) is made again (``bot.plan.standings``)."""
    done = 0
    after = 0
    with transaction(factory) as session:
        set_fact(session, RETAGGED_AT, datetime.now(UTC).isoformat())
    while True:
        with transaction(factory) as session:
            rows = entry_texts(session, after_id=after, limit=batch)
            if not rows:
                set_fact(session, RETAGGED_AT, datetime.now(UTC).isoformat())
                return done
            set_rule_tags(session, {entry_id: rules.match(title, text) for entry_id, title, text in rows})
        after = rows[-1][0]
        done += len(rows)
        if progress is not None:
            progress(len(rows))
