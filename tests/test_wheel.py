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
from pathlib import Path

import pytest

from bot.sink import free_port
from tests.conftest import ROOT

SEEDS = sorted((ROOT / "seeds").glob("*.txt"))


def _build_wheel(tmp_path: Path) -> Path:
    # Built from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
    source = tmp_path / "source"
    for part in ("bot", "templates", "config"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / part, source / part)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path)]
    build = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
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
    work = tmp_path / "empty"
    work.mkdir()
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DIGESTBOT_", "PYTHON"))}
    port = free_port()
    environment["DIGESTBOT_SMTP__PORT"] = str(port)
    digestbot = str(venv / "bin" / "digestbot")

    def run(*arguments: str, code: int = 0) -> str:
        done = subprocess.run(
            [digestbot, *arguments], cwd=work, env=environment, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == code, (arguments, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        return done.stdout

    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import bot; print(bot.__file__)"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert where.stdout.startswith(str(venv)), where.stdout

    assert "snn" in run("tags", "list")  # the shipped tag rules, found from anywhere
    sink = subprocess.Popen([digestbot, "sink", "--dir", "inbox"], cwd=work, env=environment, stdout=subprocess.PIPE)
    try:  # it listens where delivery sends (smtp.port), set in one place
        assert sink.stdout is not None and f"listening on 127.0.0.1:{port};" in sink.stdout.readline().decode()
        run("dumps", "ingest", *map(str, SEEDS))
        run("subscribers", "add", "reader@example.org", "--filter", "snn")
        assert "sent 1," in run("send-now", "reader@example.org")
        deadline = time.monotonic() + 10
        while not (work / "inbox" / "index.html").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        sink.send_signal(signal.SIGTERM)
        sink.wait(timeout=20)
    assert sink.returncode == 0
    html = (work / "inbox" / "0001.html").read_text()
    assert "SupraSNN" in html and "Unsubscribe" in html
    assert "0001.eml" in (work / "inbox" / "index.html").read_text()

    run("init", "site")
    assert (work / "site/templates/digest.html.j2").read_bytes() == (ROOT / "templates/digest.html.j2").read_bytes()
    assert (work / "site/dumps").is_dir()  # the folder its config names, there and empty
    with open(work / "site/config/tags.toml", "a") as rules:
        rules.write('\n[operator-made]\nkeywords = ["spiking"]\n')
    work = work / "site"  # where the starter's config is found, and its relative paths start
    shown = run("config", "show")
    assert '"templates_dir": "templates"' in shown and '"tags_file": "config/tags.toml"' in shown
    assert '"dump_dir": "dumps"' in shown
    assert "nothing new to ingest" in run("dumps", "ingest")  # a scan of the empty folder, no error
    assert "operator-made" in run("tags", "list")


@pytest.mark.slow
def test_the_core_install_works_without_the_taste_extra_and_says_what_it_leaves_out(tmp_path: Path) -> None:
    venv = _fresh_venv(tmp_path, _build_wheel(tmp_path), without=TASTE_EXTRA)
    work = tmp_path / "empty"
    work.mkdir()
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DIGESTBOT_", "PYTHON"))}
    port = free_port()
    environment["DIGESTBOT_SMTP__PORT"] = str(port)
    digestbot = str(venv / "bin" / "digestbot")
    python = str(venv / "bin" / "python")
    hidden = subprocess.run([python, "-c", "import numpy"], cwd=work, env=environment, capture_output=True)
    assert hidden.returncode != 0  # the scientific stack is not there

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [digestbot, *arguments], cwd=work, env=environment, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (arguments, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        return done

    library = work / "library.bib"
    library.write_text(
        "@article{a, title={SupraSNN: Supra-Linear Spiking Neural Networks}}\n"
        "@article{b, title={Spiking Transformers on FPGAs}}\n"
    )
    sink = subprocess.Popen([digestbot, "sink", "--dir", "inbox"], cwd=work, env=environment, stdout=subprocess.PIPE)
    try:
        assert sink.stdout is not None and f"listening on 127.0.0.1:{port};" in sink.stdout.readline().decode()
        run("dumps", "ingest", *map(str, SEEDS))
        run("subscribers", "add", "reader@example.org", "--filter", "snn")
        added = run("subscribers", "library", "add", "reader@example.org", str(library))
        assert "added 2 papers" in added.stdout
        assert "needs the taste extra" in added.stderr and "pip install 'digestbot[taste]'" in added.stderr
        assert "sent 1," in run("send-now", "reader@example.org").stdout  # unranked, but sent
        deadline = time.monotonic() + 10
        while not (work / "inbox" / "0001.html").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        sink.send_signal(signal.SIGTERM)
        sink.wait(timeout=20)
    assert "SupraSNN" in (work / "inbox" / "0001.html").read_text()
