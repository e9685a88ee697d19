"""The CLI through its real console-script entry point, as an operator runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SEEDS
from tests.seed_facts import MINIMAX

DIGESTBOT = shutil.which("digestbot", path=str(Path(sys.executable).parent)) or "digestbot"


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env["DIGESTBOT_DATABASE__URL"] = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    env["DIGESTBOT_PATHS__DUMP_DIR"] = str(tmp_path / "dumps")
    env["COLUMNS"] = "200"

    def _run(*args: str, code: int = 0, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [DIGESTBOT, *args], cwd=tmp_path, env={**env, **(extra_env or {})}, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    return _run


def json_lines(text: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "command",
    [[], ["dumps"], ["dumps", "ingest"], ["dumps", "list"], ["entries", "list"], ["entries", "show"],
     ["feeds", "fetch"], ["db", "upgrade"], ["db", "current"], ["config", "show"]],
)
def test_every_command_has_help(run, command: list[str]) -> None:  # type: ignore[no-untyped-def]
    assert "Usage:" in run(*command, "--help").stdout


def test_ingest_list_show_round_trip(run) -> None:  # type: ignore[no-untyped-def]
    seeds = sorted(str(p) for p in SEEDS.glob("*.txt"))
    ingested = json_lines(run("dumps", "ingest", *seeds, "--json").stdout)
    assert [r["new"] for r in ingested] == [5, 2, 9, 0]

    again = run("dumps", "ingest", seeds[0]).stdout
    assert "duplicate of source #1, nothing new" in again

    sources = json_lines(run("dumps", "list", "--json").stdout)
    assert [(s["entries"], s["new"], s["status"]) for s in sources] == [
        (5, 5, "ingested"), (5, 2, "ingested"), (16, 9, "ingested"), (4, 0, "ingested"), (0, 0, "duplicate")
    ]
    assert {"id", "file", "entries", "new", "status", "error", "sha256", "ingested_at"} <= set(sources[0])

    table = run("dumps", "list").stdout
    assert "seeds" not in table or "000_a9775d3f59806dea.txt" in table

    gpu = json_lines(run("entries", "list", "--tag", "GPU", "--json").stdout)
    assert len(gpu) == 4 and all("GPU" in e["tags"] for e in gpu)
    assert len(json_lines(run("entries", "list", "--since", "2000-01-01", "--json").stdout)) == 16
    assert json_lines(run("entries", "list", "--since", "2999-01-01", "--json").stdout) == []

    (minimax,) = [e for e in gpu if e["title"] == MINIMAX]
    (shown,) = json_lines(run("entries", "show", minimax["key"], "--json").stdout)
    assert len(shown["appearances"]) == 3
    assert {"tag": "GPU", "origin": "header"} in shown["tag_origins"]
    assert MINIMAX in run("entries", "show", minimax["key"]).stdout


def test_exit_codes(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Title only\n")
    proc = run("dumps", "ingest", str(bad), code=1)
    assert "failed:" in proc.stderr and "bad.txt:1: entry 'Title only' is truncated" in proc.stderr
    assert "bad.txt" in run("dumps", "list", "--status", "failed").stdout
    run("entries", "show", "paper:nope", code=1)
    run("entries", "list", "--since", "yesterday", code=2)
    run("dumps", "list", "--no-such-option", code=2)
    run("no-such-command", code=2)
    proc = run("--config", str(tmp_path / "missing.toml"), "dumps", "list", code=2)
    assert "config file not found" in proc.stderr


def test_scan_without_paths_uses_the_dump_folder(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "dumps").mkdir()
    target = tmp_path / "dumps" / "000.txt"
    shutil.copyfile(sorted(SEEDS.glob("*.txt"))[0], target)
    os.utime(target, (1, 1))
    assert "5 entries, 5 new" in run("dumps", "ingest").stdout
    assert "nothing new to ingest" in run("dumps", "ingest").stdout


def test_config_show_masks_the_password(run) -> None:  # type: ignore[no-untyped-def]
    shown = run("config", "show", extra_env={"DIGESTBOT_SMTP__PASSWORD": "pa55word-xyz"}).stdout
    assert "pa55word-xyz" not in shown
    assert json.loads(shown)["smtp"]["password"] == "**********"
