"""Watcher: find what is new in the dump folder and the configured feeds, and
hand each item to the ingest service in its own transaction.

A file counts as complete when its mtime is at least ``watch.quiet_seconds``
old (a writer still appending keeps bumping it); dot-files and names ending in
``.tmp``/``.part``/``~`` are never read, so writers that create a temporary
name and rename it into place are safe with any quiet period.  Only regular
files of the folder itself are read: a symlink is never followed.  A file is
remembered by (path, size, mtime): a failed file is not retried until it
changes, and never blocks the files after it.  Never parses or stores itself.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from bot.bounded_http import BoundedHttp
from bot.choose.tagging import TagRules
from bot.config import Settings
from bot.domain import FileStamp, IngestResult, SourceStatus
from bot.domain.text import path_text, shown_url
from bot.ingest.formats.fetch import FetchError, feed_http, fetch
from bot.ingest.storing import DEFAULT_MAX_FILE_BYTES, ingest_bytes, ingest_file, utcnow
from bot.store.engine import transaction
from bot.store.sources import feed_state, save_feed_state, seen_stamps

log = logging.getLogger(__name__)

IGNORED_SUFFIXES = (".tmp", ".part", ".partial", ".swp", "~")


def is_candidate(entry: os.DirEntry[str]) -> bool:
    """A regular file of the folder itself: a symlink, even to a regular file, is
    never read (it could point anywhere, /etc/passwd included)."""
    name = entry.name
    return not name.startswith(".") and not name.endswith(IGNORED_SUFFIXES) and entry.is_file(follow_symlinks=False)


def expand(paths: Iterable[Path]) -> list[Path]:
    """Files named (links followed: the operator named them), and the candidate files
    inside folders named, in name order."""
    out: list[Path] = []
    for path in paths:
        try:
            is_dir = path.is_dir()
        except OSError:  # a link loop or a name too long: ingest_file says so
            is_dir = False
        if not is_dir:
            out.append(path)
            continue
        try:
            with os.scandir(path) as entries:
                found = [Path(e.path) for e in entries if is_candidate(e)]
        except OSError as exc:  # unreadable: said once per scan, the other paths go on
            log.warning("%s: cannot list the folder: %s", path_text(path), exc.strerror or exc)
            continue
        out.extend(sorted(found, key=lambda p: os.fsencode(p.name)))
    return out


def pending_files(
    factory: sessionmaker[Session], folder: Path, *, quiet_seconds: float, now: datetime | None = None
) -> list[FileStamp]:
    """Files in *folder* not yet recorded in this version, complete, in name order."""
    now_ns, quiet_ns = int((now or utcnow()).timestamp() * 1e9), int(quiet_seconds * 1e9)
    stamps = [s for s in _folder_stamps(folder) if now_ns - s.mtime_ns >= quiet_ns]
    with factory() as session:
        seen = seen_stamps(session, stamps)
    return [s for s in stamps if s not in seen]


def recent_files(folder: Path, *, quiet_seconds: float, now: datetime | None = None) -> list[Path]:
    """Files in *folder* changed within the last *quiet_seconds*: a scan leaves them for
    the next one (their writer may not be done)."""
    now_ns, quiet_ns = int((now or utcnow()).timestamp() * 1e9), int(quiet_seconds * 1e9)
    return [s.path for s in _folder_stamps(folder) if now_ns - s.mtime_ns < quiet_ns]


def _folder_stamps(folder: Path) -> list[FileStamp]:
    """Every regular candidate file of *folder*, in name order."""
    if not folder.is_dir():
        return []
    stamps = []
    real_folder = folder.resolve()
    for path in expand([folder]):
        try:
            st = path.lstat()  # a file swapped for a link since the listing is not followed
        except OSError:  # vanished between listing and stat
            continue
        if stat.S_ISREG(st.st_mode):
            stamps.append(FileStamp(real_folder / path.name, st.st_size, st.st_mtime_ns))
    return stamps


def scan_folder(
    factory: sessionmaker[Session],
    folder: Path,
    *,
    quiet_seconds: float,
    now: datetime | None = None,
    rules: TagRules | None = None,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    stop: Callable[[], bool] = lambda: False,
) -> list[IngestResult]:
    """Ingest the pending files one by one; *stop* is asked between files (the daemon
    shutting down), so a full folder never holds a SIGTERM for longer than one file."""
    results = []
    for stamp in pending_files(factory, folder, quiet_seconds=quiet_seconds, now=now):
        if stop():
            break
        try:
            result = ingest_file(factory, stamp.path, now=now, rules=rules, max_bytes=max_bytes, follow_links=False)
        except Exception as exc:  # noqa: BLE001 - this file's failure, never the scan's
            result = _not_ingested(path_text(stamp.path), exc)
        results.append(result)
    return results


def ingest_named(
    factory: sessionmaker[Session], paths: Iterable[Path], *, rules: TagRules | None, max_bytes: int
) -> list[IngestResult]:
    """The files an operator named (``expand``: links followed), in order, each with its
    own outcome whatever happens to another."""
    results = []
    for path in expand(paths):
        try:
            results.append(ingest_file(factory, path, rules=rules, max_bytes=max_bytes))
        except Exception as exc:  # noqa: BLE001 - this file's failure, never the others'
            results.append(_not_ingested(path_text(path), exc))
    return results


def _not_ingested(name: str, exc: Exception) -> IngestResult:
    """A source whose ingest failed for a reason of the store's, not of its bytes (nothing
    was recorded, so the next scan or fetch tries it again)."""
    log.debug("ingest of %s failed", name, exc_info=exc)
    reason = " ".join(str(exc).split())[:200]
    return IngestResult(name, SourceStatus.FAILED, error=f"{name}: not ingested, tried again later: {reason}")


def fetch_feeds(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    urls: Iterable[str] | None = None,
    rules: TagRules | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> list[IngestResult]:
    """Fetch each feed URL (conditional GET) and ingest what changed; a *stop* that turns
    true (the daemon stopping) leaves the feeds not yet fetched for the next start."""
    results = []
    with feed_http() as http:
        for url in urls if urls is not None else settings.feeds.urls:
            if stop():
                break
            try:
                fetched = settings.feeds.fetched_url(url)  # an "arxiv:" source: arXiv's RSS
                results.append(_fetch_feed(factory, settings, fetched, http=http, rules=rules))
            except Exception as exc:  # noqa: BLE001 - this feed's failure, never the other feeds'
                results.append(_not_ingested(shown_url(url), exc))
    return results


def _fetch_feed(
    factory: sessionmaker[Session],
    settings: Settings,
    url: str,
    *,
    http: BoundedHttp,
    rules: TagRules | None,
) -> IngestResult:
    name = shown_url(url)  # stored, logged and printed: never a password in the URL
    with factory() as session:
        state = feed_state(session, name)
    now = utcnow()
    try:
        fetched = fetch(
            url,
            etag=state.etag,
            last_modified=state.last_modified,
            timeout=settings.feeds.timeout_seconds,
            max_bytes=settings.feeds.max_bytes,
            http=http,
        )
    except FetchError as exc:
        with transaction(factory) as session:
            save_feed_state(session, name, etag=None, last_modified=None, error=str(exc), now=now)
        return IngestResult(name, SourceStatus.FAILED, error=str(exc))
    if fetched.not_modified:
        result = IngestResult(name, SourceStatus.NOT_MODIFIED)
    else:
        result = ingest_bytes(factory, fetched.content, name=name, origin="url", now=now, rules=rules)
    with transaction(factory) as session:
        save_feed_state(
            session, name, etag=fetched.etag, last_modified=fetched.last_modified, error=result.error, now=now
        )
    return result
