"""Every file digestbot writes is written whole under a name nobody can plant a link at,
then renamed over its target: a link planted beside it, or at the target, is never
written through (bot.files)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bot.files import write_whole
from tests.helpers import Cli

SECRET = b"the victim's own bytes\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "elsewhere" / "VICTIM"
    victim.parent.mkdir()
    victim.write_bytes(SECRET)
    return victim


def test_stats_html_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / ".report.html.partial").symlink_to(victim)  # the name it wrote through before
    Cli(tmp_path)("stats", "--html", str(out / "report.html"))
    assert victim.read_bytes() == SECRET
    assert stat.S_ISREG(os.lstat(out / "report.html").st_mode)
    assert b"<html" in (out / "report.html").read_bytes()


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    target = tmp_path / "report.html"
    target.symlink_to(victim)
    write_whole(target, b"new")
    assert victim.read_bytes() == SECRET and target.read_bytes() == b"new" and not target.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


def test_a_backup_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    run = Cli(tmp_path)
    run("subscribers", "add", "ada@example.org")
    (tmp_path / "backup.sqlite3.partial").symlink_to(victim)
    run("db", "backup", str(tmp_path / "backup.sqlite3"))
    assert victim.read_bytes() == SECRET
    assert (tmp_path / "backup.sqlite3").read_bytes().startswith(b"SQLite format 3")


def test_a_link_planted_at_the_workers_lock_is_refused_never_truncated(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    run = Cli(tmp_path)
    run("subscribers", "add", "ada@example.org")
    (tmp_path / "cli.sqlite3.worker.lock").symlink_to(victim)
    refused = run("worker", code=1)
    assert "cli.sqlite3.worker.lock" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert victim.read_bytes() == SECRET
