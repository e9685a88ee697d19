"""What a process loads of its settings' files (bot.mail.parts): each part once, one
policy for a part that fails (a one-line ConfigError naming the file; a process that
runs for long refuses to start), and no second place that loads one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bot.config import ConfigError
from bot.mail.parts import Parts
from bot.store.engine import make_engine, sessions, upgrade
from bot.web.app import create_app
from tests.conftest import ROOT
from tests.helpers import Cli, settings_for

LOADERS = {"load_rules", "signing_key", "store_signing_key", "signer_of"}


def test_each_part_is_loaded_once_and_kept(tmp_path: Path) -> None:
    tags = tmp_path / "tags.toml"
    tags.write_text((ROOT / "config" / "tags.toml").read_text())
    parts = Parts(settings_for(tmp_path, paths={"tags_file": str(tags)}))
    rules, key = parts.rules, parts.key
    tags.write_text("not = [toml")  # read again, it would fail: it is not read again
    assert parts.check().rules is rules and parts.key is key and parts.signer is None
    assert rules.rules and dict(parts.keywords)
    assert "key" not in repr(parts).replace("key loaded", "") and key.decode() not in repr(parts)


@pytest.mark.parametrize("content", ["not = [toml", "[x]\nkeywords = 7\n"])
def test_a_broken_rules_file_is_one_line_naming_it(tmp_path: Path, content: str) -> None:
    tags = tmp_path / "tags.toml"
    tags.write_text(content)
    with pytest.raises(ConfigError) as raised:
        Parts(settings_for(tmp_path, paths={"tags_file": str(tags)})).check()
    assert str(tags) in str(raised.value) and "\n" not in str(raised.value)


def test_the_pages_refuse_to_start_on_a_broken_part(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, site=True, paths={"tags_file": str(tmp_path / "missing.toml")})
    engine = make_engine(f"sqlite:///{tmp_path / 'store.sqlite3'}")
    upgrade(engine)
    with pytest.raises(ConfigError, match="missing.toml: tag rules file not found"):
        create_app(settings, sessions(engine))
    engine.dispose()


@pytest.mark.parametrize("command", [["send-now", "a@example.org"], ["serve", "--port", "1"], ["dumps", "ingest"]])
def test_a_command_that_needs_a_broken_part_says_so_in_one_line(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "dumps").mkdir()
    broken = tmp_path / "tags.toml"
    broken.write_text("not = [toml")
    done = Cli(tmp_path, {"DIGESTBOT_PATHS__TAGS_FILE": str(broken)})(*command, code=2)
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith(f"error: {broken}:") and "Invalid value" in said, done.stderr


def test_no_module_but_the_parts_loads_a_part() -> None:
    """The tag rules, the signing key and the DKIM signers are loaded in bot.mail.parts
    (and the functions it calls); the planner's ranker key is the one left, read only
    when an outside ranker is named."""
    loading = []
    for path in sorted((ROOT / "bot").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in {"bot/mail/parts.py", "bot/tokens.py", "bot/choose/tagging.py", "bot/mail/dkim.py"}:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if called in LOADERS:
                    loading.append(f"{name}:{node.lineno} {called}")
    assert loading == ["bot/plan/planner.py:142 signing_key"]
