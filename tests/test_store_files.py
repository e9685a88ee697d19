"""The names of a SQLite store's files (``bot.store.store_files``), spelled once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.store.store_files import database_files, lock_files, role_lock, sqlite_files
from tests.conftest import ROOT

_SPELLED = re.compile(r"""["'][^"'\n]*(-wal|-shm|-journal|\.lock)["']""")


def test_a_store_s_files_are_named_beside_it() -> None:
    store = Path("/var/lib/digestbot/store.sqlite3")
    assert [p.name for p in database_files(store)] == ["store.sqlite3", "store.sqlite3-wal", "store.sqlite3-shm"]
    assert sqlite_files(store)[-1].name == "store.sqlite3-journal"
    assert [p.name for p in lock_files(store)] == [
        "store.sqlite3.lock",
        "store.sqlite3.scheduler.lock",
        "store.sqlite3.worker.lock",
    ]
    with pytest.raises(ValueError, match="planner is not a role"):
        role_lock(store, "planner")


def test_no_other_module_spells_a_store_file_s_name() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "bot").rglob("*.py"))
        if path.name != "store_files.py" and "migrations" not in path.parts
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _SPELLED.search(line)
    ]
    assert found == []
