"""deploy/: the systemd units the README's deployment section uses.  They start real
commands, keep the hardening the README promises, and pass systemd's own checks
(``systemd-analyze verify`` and its offline security score) where systemd is here."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import DIGESTBOT

UNITS = sorted((ROOT / "deploy").glob("*.service"))
ANALYZE = shutil.which("systemd-analyze")
needs_systemd = pytest.mark.skipif(
    ANALYZE is None, reason="no systemd-analyze here (Debian: apt-get install systemd; .ci/run installs it)"
)
PROMISED = (
    "User=digestbot",
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ReadWritePaths=/var/lib/digestbot",
    "Restart=on-failure",
    "RestartPreventExitStatus=2",
    "KillSignal=SIGTERM",
    "LimitNOFILE=65536",
)


def _directives(unit: Path) -> list[str]:
    return [line for line in unit.read_text().splitlines() if line and not line.startswith(("#", "["))]


def test_there_is_a_unit_per_role() -> None:
    starts = {unit.name: next(d for d in _directives(unit) if d.startswith("ExecStart=")) for unit in UNITS}
    assert {name: line.split()[1] for name, line in starts.items()} == {
        "digestbot.service": "run",
        "digestbot-scheduler.service": "scheduler",
        "digestbot-worker@.service": "worker",
        "digestbot-serve.service": "serve",
    }


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_unit_keeps_the_promised_hardening_and_starts_a_real_command(unit: Path) -> None:
    directives = _directives(unit)
    for promised in PROMISED:
        assert promised in directives, f"{unit.name}: {promised}"
    (start,) = [d for d in directives if d.startswith("ExecStart=")]
    arguments = start.removeprefix("ExecStart=").split()[1:]
    done = subprocess.run([DIGESTBOT, *arguments, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_a_stop_ends_before_the_unit_would_kill_it(unit: Path) -> None:
    """systemd kills a unit TimeoutStopSec after its SIGTERM, which is the crash window:
    the stop's own deadline (and the web server's) ends well before."""
    from bot.config import DigestConfig
    from bot.web.server import STOP_SECONDS

    (timeout,) = [int(d.split("=", 1)[1]) for d in _directives(unit) if d.startswith("TimeoutStopSec=")]
    assert DigestConfig().stop_seconds + 30 <= timeout and STOP_SECONDS + 30 <= timeout


@needs_systemd
@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_accepts_each_unit_and_scores_it_safe(unit: Path, tmp_path: Path) -> None:
    assert ANALYZE is not None
    # The units name where the install guide puts digestbot; here it is this checkout's.
    copy = tmp_path / unit.name.replace("@.", "@1.")
    copy.write_text(unit.read_text().replace("/opt/digestbot/bin/digestbot", DIGESTBOT))
    verified = subprocess.run([ANALYZE, "verify", "--man=no", str(copy)], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and verified.stderr == "", verified.stderr  # unknown keys are only warnings
    scored = subprocess.run(
        [ANALYZE, "security", "--offline=true", str(copy)], capture_output=True, text=True, timeout=60
    )
    found = re.search(r"Overall exposure level for \S+: ([\d.]+)", scored.stdout + scored.stderr)
    assert found is not None, scored.stdout[-500:] + scored.stderr[-500:]
    assert float(found.group(1)) <= 2.5, scored.stdout  # systemd calls up to 3.9 "OK"
