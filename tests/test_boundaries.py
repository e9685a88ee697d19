"""The package boundaries make lint checks (pyproject.toml, tool.importlinter): the real
tree keeps them, and a copy with one import added that closes a cycle (between packages,
or between two modules of one package) or makes the store import a stage fails them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    command = Path(sys.executable).with_name("lint-imports")
    if not command.exists():
        pytest.skip("lint-imports is not installed (pip install -e '.[test]' brings import-linter)")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(command), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "bot", tmp_path / "bot", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_its_boundaries(tmp_path: Path) -> None:
    result = _lint_imports(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "added", "named"),
    [
        ("plan/cadence.py", "from bot.mail import message", ".plan -> .mail"),  # plan <-> mail
        ("store/base.py", "from bot.store import schema", ""),  # base <-> schema inside the store
        ("store/bulk.py", "from bot.choose import filters", "bot.store"),  # the store imports a stage
        # ingest, below reports, imports it: no cycle, but upwards in the order
        ("ingest/watcher.py", "from bot.reports import charts", "depend downwards, in CONTRIBUTING's order BROKEN"),
    ],
)
def test_one_import_that_crosses_a_boundary_fails_the_check(
    tmp_path: Path, module: str, added: str, named: str
) -> None:
    tree = _copy(tmp_path)
    with (tree / "bot" / module).open("a", encoding="utf-8") as source:
        source.write(f"\n{added}  # noqa\n")
    result = _lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout
    assert named in result.stdout


def _module_cycles(tree: Path) -> list[list[str]]:
    """Every set of modules that import each other round (Tarjan's components), counting a
    package's ``__init__`` that imports a module of its own that imports it back, which
    import-linter's sibling check leaves out."""
    pytest.importorskip("grimp", reason="import-linter brings grimp (pip install -e '.[test]')")
    code = (
        "import grimp, json\n"
        "g = grimp.build_graph('bot', cache_dir=None)\n"
        "print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    found = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=True)
    edges: dict[str, list[str]] = json.loads(found.stdout)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in edges[module]:
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            part = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(part) > 1:
                cycles.append(sorted(part))

    for module in sorted(edges):
        if module not in order:
            visit(module)
    return cycles


def test_no_modules_import_each_other_round(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    assert _module_cycles(tree) == []
    with (tree / "bot" / "domain" / "__init__.py").open("a", encoding="utf-8") as source:
        source.write("\nfrom bot.domain.identity import title_key  # noqa\n")
    assert _module_cycles(tree) == [["bot.domain", "bot.domain.identity"]]
