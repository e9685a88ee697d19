"""The wheel `pip install .` installs carries what digestbot reads at run time: the
templates (digests and the subscriber pages) and the migrations, beside the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_the_wheel_carries_templates_and_migrations(tmp_path: Path) -> None:
    # Built from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
    source = tmp_path / "source"
    for part in ("bot", "templates"):
        shutil.copytree(ROOT / part, source / part)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)]
    build = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("digestbot-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"templates/{p.relative_to(ROOT / 'templates')}" for p in (ROOT / "templates").rglob("*") if p.is_file()}
    assert shipped and shipped <= names, sorted(shipped - names)
    migrations = {f"bot/migrations/versions/{p.name}" for p in (ROOT / "bot/migrations/versions").glob("*.py")}
    assert migrations <= names, sorted(migrations - names)
    assert not {n for n in names if n.startswith(("tests/", "bench/"))}
