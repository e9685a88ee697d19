"""The docs: the README is a short front door, docs/architecture.md names every module,
the two reference pages are what the code generates (docs/reference.py), and the site
builds with MkDocs in strict mode, where a broken link, a missing anchor or a page left
out of the navigation fails the build."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def test_the_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert "make demo" in readme and "make test" in readme
    for page in (ROOT / "docs").glob("*.md"):
        assert f"docs/{page.name}" in readme, f"the README's map leaves out docs/{page.name}"


def holds_code(path: Path) -> bool:
    """Whether a package's ``__init__.py`` holds more than its docstring, imports and ``__all__``."""
    import ast

    body = ast.parse(path.read_text(encoding="utf-8")).body
    return any(
        not isinstance(node, (ast.Import, ast.ImportFrom))
        and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        and not (isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"])
        for node in body
    )


def unnamed_modules(architecture: str, package: Path) -> list[str]:
    """The modules of *package* that *architecture* names neither by path nor by file name
    on a line that names their package: every module, ``__main__.py``, the migrations'
    ``env.py`` and each ``__init__.py`` that holds code (the migrations' versions are
    named by the rule for their file names, not one by one)."""
    lines = architecture.splitlines()
    missing = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent).as_posix()
        if "/migrations/versions/" in relative or (path.name == "__init__.py" and not holds_code(path)):
            continue
        folder = relative.rsplit("/", 1)[0] + "/"
        if f"`{relative}`" in architecture or relative + "`" in architecture:
            continue
        if path.name == "__init__.py" or not any(f"`{folder}`" in line and f"`{path.name}`" in line for line in lines):
            missing.append(relative)
    return missing


def test_the_architecture_names_every_module(tmp_path: Path) -> None:
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    assert unnamed_modules(architecture, ROOT / "bot") == []
    # A new module nobody wrote down is found, at the top level and in a package.
    shutil.copytree(ROOT / "bot", tmp_path / "bot", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "bot" / "newcomer.py").write_text('"""New."""\n')
    (tmp_path / "bot" / "store" / "newcomers.py").write_text('"""New."""\n')
    # A package whose __init__ gains code is found too; one of imports and __all__ is not.
    (tmp_path / "bot" / "fresh").mkdir()
    (tmp_path / "bot" / "fresh" / "__init__.py").write_text('"""Fresh."""\nfrom os import sep\n__all__ = ["sep"]\n')
    (tmp_path / "bot" / "run" / "__init__.py").write_text('"""Run."""\nEVERY = 3\n')
    assert unnamed_modules(architecture, tmp_path / "bot") == [
        "bot/newcomer.py",
        "bot/run/__init__.py",
        "bot/store/newcomers.py",
    ]


def test_the_reference_pages_are_what_the_code_generates() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "reference.py"), "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    configuration = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    assert "| `port` | `int` | `1025` | >= 1, <= 65535 | `DIGESTBOT_SMTP__PORT` |" in configuration
    assert "`DIGESTBOT_SUBSCRIBERS__LIBRARY_MAX_PAPERS`" in configuration
    cli = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert "## digestbot subscribers add" in cli and "Usage: digestbot subscribers add [OPTIONS] EMAIL" in cli


def _build(source: Path, site: Path) -> subprocess.CompletedProcess[str]:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists():
        pytest.skip("mkdocs is not installed (pip install -e '.[test]' brings it)")
    return subprocess.run(
        [str(mkdocs), "build", "--strict", "--config-file", str(source / "mkdocs.yml"), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    shutil.copytree(ROOT / "docs", source / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", source / "mkdocs.yml")
    return source


def test_the_site_builds_with_every_link_resolved(tmp_path: Path) -> None:
    done = _build(_copy(tmp_path), tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").exists()


@pytest.mark.parametrize(
    "broken",
    [
        "[a page that is not there](nowhere.md)",
        "[an anchor that is not there](deliverability.md#no-such-section)",
    ],
)
def test_a_broken_link_fails_the_build(tmp_path: Path, broken: str) -> None:
    source = _copy(tmp_path)
    with (source / "docs" / "operating.md").open("a", encoding="utf-8") as page:
        page.write(f"\nSee {broken}.\n")
    done = _build(source, tmp_path / "site")
    assert done.returncode != 0
    assert "operating.md" in done.stderr


def test_a_page_left_out_of_the_navigation_fails_the_build(tmp_path: Path) -> None:
    source = _copy(tmp_path)
    (source / "docs" / "orphan.md").write_text("# A page nobody can reach\n")
    done = _build(source, tmp_path / "site")
    assert done.returncode != 0 and "orphan.md" in done.stderr


def test_start_up_figures_come_with_the_days_speed() -> None:
    """docs/cli.md gave 0.15 s and 0.6 s as a promise of every day; a newcomer measured
    0.36 s and 1.9 s on a loaded one.  Its figures are a measured day's, beside that day's
    bare Python start, and as multiples of it."""
    cli = (ROOT / "docs" / "cli.md").read_text()
    said = " ".join(cli.split("## Exit codes")[0].split())
    figures = re.findall(r"\b\d+ ms\b", said)
    assert len(figures) >= 4 and "bare Python started in" in said and "times a bare Python" in said
    assert not re.search(r"\babout 0\.\d+ s\b", said)


@pytest.mark.slow
def test_the_start_up_bench_prints_each_figure_beside_the_days_speed() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "startup.py"), "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("python alone") and lines[0].endswith("the day's speed")
    assert len(lines) == 5 and all(line.endswith("x python alone") for line in lines[1:]), lines
