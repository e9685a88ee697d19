"""Watcher: name order, quiet period, temp names, failures remembered but not blocking."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from bot.domain import SourceStatus
from bot.ingest.watcher import pending_files, scan_folder
from bot.store.entry_reads import count_entries
from tests.conftest import copy_aged
from tests.seed_facts import NEW_PER_DUMP


def test_scan_ingests_in_name_order_then_nothing(
    factory: sessionmaker[Session], seed_files: list[Path], dump_dir: Path
) -> None:
    for path in reversed(seed_files):  # creation order must not matter
        copy_aged(path, dump_dir)
    results = scan_folder(factory, dump_dir, quiet_seconds=5)
    assert [Path(r.path).name for r in results] == [p.name for p in seed_files]
    assert [r.new for r in results] == NEW_PER_DUMP
    assert scan_folder(factory, dump_dir, quiet_seconds=5) == []


def test_files_still_being_written_or_temporary_are_left_alone(
    factory: sessionmaker[Session], seed_files: list[Path], dump_dir: Path
) -> None:
    fresh = copy_aged(seed_files[0], dump_dir, age_seconds=0)
    os.utime(fresh)  # just written
    copy_aged(seed_files[1], dump_dir, ".001.txt")
    copy_aged(seed_files[1], dump_dir, "001.txt.part")
    copy_aged(seed_files[1], dump_dir, "001.txt.tmp")
    assert scan_folder(factory, dump_dir, quiet_seconds=5) == []
    later = datetime.fromtimestamp(fresh.stat().st_mtime + 6, UTC)
    (result,) = scan_folder(factory, dump_dir, quiet_seconds=5, now=later)
    assert result.path == str(fresh.resolve()) and result.new == 5


def test_a_failed_file_is_recorded_not_retried_and_does_not_block(
    factory: sessionmaker[Session], seed_files: list[Path], dump_dir: Path
) -> None:
    copy_aged(seed_files[0], dump_dir, "000.txt")
    bad = dump_dir / "001-broken.txt"
    bad.write_bytes(b"\xff\xfe garbage")
    os.utime(bad, (0, 0))
    copy_aged(seed_files[1], dump_dir, "002.txt")
    results = scan_folder(factory, dump_dir, quiet_seconds=5)
    assert [r.status for r in results] == [SourceStatus.INGESTED, SourceStatus.FAILED, SourceStatus.INGESTED]
    assert results[1].error == f"{bad.resolve()}:1: not UTF-8: byte 0xFF at offset 0 (invalid start byte)"
    assert scan_folder(factory, dump_dir, quiet_seconds=5) == []  # not retried every minute

    # Fixed in place (new content, new mtime): picked up again.
    bad.write_bytes(seed_files[2].read_bytes())
    os.utime(bad, (1, 1))
    (retried,) = scan_folder(factory, dump_dir, quiet_seconds=5)
    assert (retried.status, retried.new) == (SourceStatus.INGESTED, 9)
    with factory() as s:
        assert count_entries(s) == 16


def test_touched_file_is_read_again_and_found_duplicate(
    factory: sessionmaker[Session], seed_files: list[Path], dump_dir: Path
) -> None:
    path = copy_aged(seed_files[0], dump_dir)
    scan_folder(factory, dump_dir, quiet_seconds=5)
    os.utime(path, (10, 10))
    assert [p.path for p in pending_files(factory, dump_dir, quiet_seconds=5)] == [path.resolve()]
    (again,) = scan_folder(factory, dump_dir, quiet_seconds=5)
    assert (again.status, again.new) == (SourceStatus.DUPLICATE, 0)


def test_missing_folder_is_empty(factory: sessionmaker[Session], tmp_path: Path) -> None:
    assert scan_folder(factory, tmp_path / "nope", quiet_seconds=0) == []
