"""The built-in sink's cost per message as its folder grows (issue 76, item 7): the same
messages sent to ``digestbot sink``'s handler (an inbox kept with its index) over a
folder already holding 10, then 10,000 messages, in one run.

    .venv/bin/python bench/sink.py [--messages 200]

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import smtplib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.tools.inbox_index import last_number  # noqa: E402
from bot.tools.sink import Sink, SinkHandler  # noqa: E402
from tests.test_sink_inbox import digest_message  # noqa: E402


def per_message(already: int, messages: int) -> float:
    """Milliseconds a message, over a folder holding *already* messages."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        one = digest_message(0)
        for n in range(1, already + 1):
            (folder / f"{n:04d}.eml").write_bytes(one)
        handler = SinkHandler(inbox=folder, keep_index=True, first_number=last_number(folder))
        with Sink(handler) as sink, smtplib.SMTP("127.0.0.1", sink.port) as client:
            started = time.perf_counter()
            for n in range(messages):
                client.sendmail("bot@example.org", [f"r{n}@example.org"], digest_message(n))
            return (time.perf_counter() - started) * 1000 / messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    small = per_message(10, args.messages)
    large = per_message(10_000, args.messages)
    print(f"a message over 10 in the folder: {small:.2f} ms; over 10,000: {large:.2f} ms (ratio {large / small:.2f})")


if __name__ == "__main__":
    main()
