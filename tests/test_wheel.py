"""The wheel `pip install .` installs is the whole product: installed into a fresh
virtualenv and run from an empty folder, it finds its templates and tag rules,
ingests, sends, and writes an editable starter with ``digestbot init``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bot.tools.sink import free_port
from tests.conftest import ROOT

SEEDS = sorted((ROOT / "seeds").glob("*.txt"))


def _build_wheel(tmp_path: Path) -> Path:
    # Built from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
    source = tmp_path / "source"
    for part in ("bot", "templates", "config"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / part, source / part)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path)]
    build = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    # No warning for whoever installs it (a license as a TOML table printed 12 lines, thrice).
    assert "Deprecat" not in build.stdout + build.stderr
    (wheel,) = tmp_path.glob("digestbot-*.whl")
    return wheel


# What the taste extra brings (with scikit-learn's own dependencies).
TASTE_EXTRA = ("numpy", "scipy", "sklearn", "scikit_learn", "joblib", "threadpoolctl")


def _fresh_venv(tmp_path: Path, wheel: Path, *, without: tuple[str, ...] = ()) -> Path:
    """A new virtualenv holding the wheel; its dependencies are this interpreter's
    (a path entry, so nothing else from this environment, the checkout included),
    but for the distributions named in *without*."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    dependencies = Path(sysconfig.get_paths()["purelib"])
    if without:
        kept = tmp_path / "dependencies"
        kept.mkdir()
        for entry in dependencies.iterdir():
            if not entry.name.lower().startswith(without):
                (kept / entry.name).symlink_to(entry)
        dependencies = kept
    Path(purelib, "dependencies.pth").write_text(f"{dependencies}\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)]
    done = subprocess.run(install, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return venv


class Installed:
    """The installed ``digestbot`` run in a folder (an empty one to start with), its
    environment free of this checkout's, sending to a sink on a port of its own."""

    def __init__(self, tmp_path: Path, venv: Path) -> None:
        self.venv, self.work = venv, tmp_path / "empty"
        self.work.mkdir()
        self.environment = {k: v for k, v in os.environ.items() if not k.startswith(("DIGESTBOT_", "PYTHON"))}
        self.port = free_port()
        self.environment["DIGESTBOT_SMTP__PORT"] = str(self.port)

    def run(self, *arguments: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.venv / "bin" / "digestbot"), *arguments],
            cwd=self.work,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == code, (arguments, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        return done

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.venv / "bin" / "python"), "-c", code]
        return subprocess.run(command, cwd=self.work, env=self.environment, capture_output=True, text=True)

    @contextmanager
    def sink(self) -> Iterator[Path]:
        """``digestbot sink`` on the port delivery sends to (smtp.port, set in one place);
        yields its inbox folder, and stops it cleanly after."""
        sink = subprocess.Popen(
            [str(self.venv / "bin" / "digestbot"), "sink", "--dir", "inbox"],
            cwd=self.work,
            env=self.environment,
            stdout=subprocess.PIPE,
        )
        try:
            assert sink.stdout is not None and f"listening on 127.0.0.1:{self.port};" in sink.stdout.readline().decode()
            yield self.work / "inbox"
        finally:
            sink.send_signal(signal.SIGTERM)
            sink.wait(timeout=20)
        assert sink.returncode == 0


def _wait_for(path: Path, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.mark.slow
def test_an_installed_wheel_works_from_an_empty_folder(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("templates", "config"):
        files = {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*") if p.is_file()}
        assert {f"bot/shipped_files/{f}" for f in files} <= names
    migrations = {f"bot/migrations/versions/{p.name}" for p in (ROOT / "bot/migrations/versions").glob("*.py")}
    assert migrations <= names, sorted(migrations - names)
    assert not {n for n in names if n.startswith(("tests/", "bench/", "templates/", "config/"))}

    venv = _fresh_venv(tmp_path, wheel)
    installed = Installed(tmp_path, venv)
    where = installed.python("import bot; print(bot.__file__)")
    assert where.stdout.startswith(str(venv)), where.stdout

    assert "snn" in installed.run("tags", "list").stdout  # the shipped tag rules, found from anywhere
    with installed.sink() as inbox:
        installed.run("dumps", "ingest", *map(str, SEEDS))
        installed.run("subscribers", "add", "reader@example.org", "--filter", "snn")
        assert "sent 1," in installed.run("send-now", "reader@example.org").stdout
        _wait_for(inbox / "index.html")
    html = (inbox / "0001.html").read_text()
    assert "SupraSNN" in html and "Unsubscribe" in html
    assert "0001.eml" in (inbox / "index.html").read_text()
    installed.run("stats", "--html", "list.html")  # its page template is shipped too
    assert "<bdi>sent</bdi>: 1" in (installed.work / "list.html").read_text()

    work = installed.work
    installed.run("init", "site")
    assert (work / "site/templates/digest.html.j2").read_bytes() == (ROOT / "templates/digest.html.j2").read_bytes()
    assert (work / "site/dumps").is_dir()  # the folder its config names, there and empty
    with open(work / "site/config/tags.toml", "a") as rules:
        rules.write('\n[operator-made]\nkeywords = ["spiking"]\n')
    installed.work = work / "site"  # where the starter's config is found, and its relative paths start
    shown = installed.run("config", "show").stdout
    assert '"templates_dir": "templates"' in shown and '"tags_file": "config/tags.toml"' in shown
    assert '"dump_dir": "dumps"' in shown
    assert "nothing new to ingest" in installed.run("dumps", "ingest").stdout  # the empty folder, no error
    assert "operator-made" in installed.run("tags", "list").stdout


@pytest.mark.slow
def test_the_core_install_works_without_its_extras_and_says_what_each_leaves_out(tmp_path: Path) -> None:
    without = (*TASTE_EXTRA, "psycopg")
    installed = Installed(tmp_path, _fresh_venv(tmp_path, _build_wheel(tmp_path), without=without))
    assert installed.python("import numpy").returncode != 0  # the scientific stack is not there
    assert installed.python("import psycopg").returncode != 0  # nor PostgreSQL's driver
    moving = installed.run("db", "copy", "--to", "postgresql+psycopg://postgres@127.0.0.1:5432/nowhere", code=2)
    assert moving.stderr == (
        "error: a PostgreSQL store needs the postgres extra, which is not installed: "
        "pip install 'digestbot[postgres]'\n"
    )
    library = installed.work / "library.bib"
    library.write_text(
        "@article{a, title={SupraSNN: Supra-Linear Spiking Neural Networks}}\n"
        "@article{b, title={Spiking Transformers on FPGAs}}\n"
    )
    with installed.sink() as inbox:
        installed.run("dumps", "ingest", *map(str, SEEDS))
        installed.run("subscribers", "add", "reader@example.org", "--filter", "snn")
        added = installed.run("subscribers", "library", "add", "reader@example.org", str(library))
        assert "added 2 papers" in added.stdout
        assert "needs the taste extra" in added.stderr and "pip install 'digestbot[taste]'" in added.stderr
        assert "sent 1," in installed.run("send-now", "reader@example.org").stdout  # unranked, but sent
        _wait_for(inbox / "0001.html")
    assert "SupraSNN" in (inbox / "0001.html").read_text()
