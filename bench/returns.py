"""Returned-mail benchmark: how fast a day's bounces are read from a Maildir.

Usage: python bench/returns.py [--messages 2000]

Makes --messages subscribers with one sent digest each, and a Maildir holding one
returned message per digest, cycling through the fixtures of tests/fixtures/returns/
with each one's VERP address pointed at its own digest. Prints:

  * classify: messages/s of the pure classifier alone (flufl.bounce and the email package);
  * read: messages/s of `read_inbox` on a SQLite store (classify, one transaction per
    message, the rename to cur/), and the ratio of the two;
  * again: seconds to read the Maildir once more (everything is Seen: nothing is opened).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.config import Settings  # noqa: E402
from bot.mail.verp import return_path  # noqa: E402
from bot.returns.classify import Addresses, classify  # noqa: E402
from bot.returns.inbox_reading import read_inbox, reading_of  # noqa: E402
from bot.returns.mailboxes import MaildirBox  # noqa: E402
from bot.store.engine import make_engine, sessions, upgrade  # noqa: E402
from tests.helpers import queue_digests  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "returns"
KEY = b"bench-signing-key-0123456789"
BOUNCES = "bounces@lab.example.org"
FIXTURE_VERP = "bounces+d42.artqb5lrcjmvzx4n@lab.example.org"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        engine = make_engine(f"sqlite:///{root / 'store.sqlite3'}")
        upgrade(engine)
        factory = sessions(engine)
        queue_digests(factory, args.messages)
        templates = [p.read_bytes() for p in sorted(FIXTURES.glob("*.eml")) if FIXTURE_VERP.encode() in p.read_bytes()]
        maildir = root / "Maildir"
        for sub in ("cur", "new", "tmp"):
            (maildir / sub).mkdir(parents=True)
        messages = []
        for n in range(args.messages):
            verp = return_path(KEY, BOUNCES, n + 1).encode()
            data = templates[n % len(templates)].replace(FIXTURE_VERP.encode(), verp)
            messages.append(data)
            (maildir / "new" / f"1764000000.M{n}P1.bench").write_bytes(data)
        known = Addresses(KEY, BOUNCES, "unsubscribe@lab.example.org")
        started = time.perf_counter()
        for data in messages:
            classify(data, known)
        classify_rate = len(messages) / (time.perf_counter() - started)
        settings = Settings.model_validate({"sender": {"bounce_address": BOUNCES}})
        box = MaildirBox(maildir, "", 5_000_000)
        started = time.perf_counter()
        report = read_inbox(factory, box, reading_of(settings, KEY))
        read_rate = report.read / (time.perf_counter() - started)
        started = time.perf_counter()
        again = read_inbox(factory, box, reading_of(settings, KEY))
        again_seconds = time.perf_counter() - started
        engine.dispose()
    counts = ", ".join(f"{kind.value} {n}" for kind, n in sorted(report.kinds.items()))
    print(f"messages: {report.read} ({counts}; {len(report.changed)} status changes)")
    print(f"classify: {classify_rate:,.0f} messages/s")
    print(f"read:     {read_rate:,.0f} messages/s ({read_rate / classify_rate:.2f} x classify alone)")
    print(f"again:    {again_seconds:.3f} s for {again.read} unread messages")


if __name__ == "__main__":
    main()
