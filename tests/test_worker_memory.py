"""What keeps a `digestbot worker` small: it loads no library only other roles use,
and its threads share one malloc arena (bench/README.md, "Memory of a worker")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from bot.run.malloc_arenas import share_one_arena

# A worker's process imports the whole CLI and the daemon; none of these is needed to
# deliver, and each costs megabytes in every worker (httpx also loads pygments).
NOT_IN_A_WORKER = ("httpx", "pygments", "feedparser", "dkim", "dns", "alembic")


def test_a_worker_loads_no_library_of_another_role() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        import bot.cli, bot.run.scheduler, bot.delivery.loop, bot.mail.mailer
        print(" ".join(sorted(m for m in {NOT_IN_A_WORKER!r} if m in sys.modules)))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# Threads that allocate large blocks, then glibc's own count of its arenas.
_ARENAS = """
import ctypes, sys, threading
from bot.run.malloc_arenas import share_one_arena
if sys.argv[1] == "shared":
    assert share_one_arena()
def churn():
    for _ in range(200):
        blocks = [bytearray(200_000) for _ in range(8)]
        del blocks
threads = [threading.Thread(target=churn) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()
"""


def _arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # glibc's defaults, as a daemon has
    out = subprocess.run([sys.executable, "-c", _ARENAS, mode], capture_output=True, text=True, check=True, env=env)
    return out.stderr.count("Arena ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc arenas are glibc's")
def test_the_threads_of_a_daemon_share_one_malloc_arena() -> None:
    if not share_one_arena():
        pytest.skip("this C library is not glibc: it has no M_ARENA_MAX")
    assert _arenas("own") > 1  # what glibc does unless told: the check can tell them apart
    assert _arenas("shared") == 1
