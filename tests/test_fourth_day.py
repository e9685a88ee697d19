"""Issue 76, what a newcomer tripped on: each item a test that failed before."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from tests.helpers import DIGESTBOT, daemon_env


def test_serve_on_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Item 3: six uvicorn lines ending in [Errno 98] and exit 3, a code the table lacks."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = daemon_env(tmp_path, "s.sqlite3", tmp_path, 9)
        done = subprocess.run(
            [DIGESTBOT, "serve", "--port", str(port)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if not line.startswith("note:")]
    assert errors == [f"error: web.listen_port: cannot listen on 127.0.0.1:{port}: Address already in use "
                      "(--port or web.listen_port chooses another)"], done.stderr  # fmt: skip


def test_a_tldr_can_be_tried_without_a_chat_model(tmp_path: Path) -> None:
    """Item 6: docs/llm.md offered nothing to try a TL;DR without a real chat model, said
    `python` where the example says `python3`, and not whether `[llm]` needs a restart."""
    import sys

    from tests.conftest import ROOT
    from tests.helpers import DUMP, Cli

    guide = (ROOT / "docs" / "llm.md").read_text()
    assert "examples/chat/first_sentence_server.py" in guide and "restart" in guide
    assert "`python " not in guide
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "chat" / "first_sentence_server.py"), "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        port = server.stdout.readline().split(":")[-1].strip()
        llm = {"DIGESTBOT_LLM__BASE_URL": f"http://127.0.0.1:{port}/v1", "DIGESTBOT_LLM__CHAT_MODEL": "first-sentence"}
        cli = Cli(tmp_path, llm | {"DIGESTBOT_WATCH__QUIET_SECONDS": "0"})
        (tmp_path / "dumps").mkdir()
        (tmp_path / "dumps" / "a.txt").write_text(DUMP)
        cli("dumps", "ingest")
        cli("subscribers", "add", "ada@example.org")
        assert "1 written" in cli("llm", "tldrs").stdout
    finally:
        server.terminate()
        server.wait(10)
