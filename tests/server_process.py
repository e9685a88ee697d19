"""A test server run as a process of its own (``python -m tests.NAME --port 0``), which
prints ``listening on PORT`` once it listens: started, and stopped after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_server(module: str, what: str, *args: str) -> tuple[subprocess.Popen[str], int]:
    """``python -m tests.<module> --port 0 ARGS`` started, and the port it said it listens on."""
    process = subprocess.Popen(
        [sys.executable, "-m", f"tests.{module}", "--port", "0", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"the {what} did not start: {line!r}")
    return process, int(line.split()[-1])


def stop_server(process: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after ten seconds."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
