"""No spam points of our own making: every demo digest and a worst-case one scored by
SpamAssassin with local tests only (Debian's ``spamassassin``; ``.ci/run`` installs it).

The positive points must sum to at most 0.5; list-manager bonuses (negative) do not
count, so a receiver that does not trust our list headers sees the same."""

from __future__ import annotations

import mailbox
import os
import re
import shutil
import subprocess
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from bot.domain import DigestContent, EntryKind
from bot.mail.mailer import Mailer
from bot.mail.message import Headers, build_message
from bot.mail.parts import Parts
from bot.plan.message_ids import message_id_for
from bot.tokens import make_token
from tests.conftest import ROOT
from tests.helpers import DIGESTBOT, digest_item, reader, settings_for

SPAMASSASSIN = shutil.which("spamassassin")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        SPAMASSASSIN is None, reason="no spamassassin here (Debian: apt-get install spamassassin; .ci/run installs it)"
    ),
]
MOST_POINTS = 0.5
_POSITION = re.compile(r"^X-Test-Position: (\d+)$", re.M)
_RULE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s+([A-Z0-9_]+)\s", re.M)


def positive_rules_of_each(messages: list[bytes], folder: Path) -> list[dict[str, float]]:
    """The positive rules SpamAssassin finds in each of *messages*, in order: one run over
    an mbox of all of them (a run's start, about a second, is most of its cost)."""
    assert SPAMASSASSIN is not None
    box = mailbox.mbox(folder / "all.mbox")
    for position, message in enumerate(messages):
        numbered = mailbox.mboxMessage(message)
        numbered["X-Test-Position"] = str(position)  # the run may give them back in another order
        box.add(numbered)
    box.flush()
    with open(folder / "all.mbox", "rb") as stream, open(folder / "scored.mbox", "wb") as scored:
        done = subprocess.run([SPAMASSASSIN, "-L", "-t", "--mbox"], stdin=stream, stdout=scored, stderr=subprocess.PIPE)
    # Each message comes back with its report appended; a spam one comes back wrapped (its
    # own headers, the position among them, inside) and carries the report twice.
    texts = [m.as_bytes().decode("utf-8", "replace") for m in mailbox.mbox(folder / "scored.mbox")]
    back = {int(found.group(1)): text for text in texts if (found := _POSITION.search(text))}
    assert sorted(back) == list(range(len(messages))), f"{len(texts)} back (rc {done.returncode}): {done.stderr!r}"
    reports = [back[position] for position in sorted(back)]
    assert all("Content analysis details:" in report for report in reports), "a message came back without its report"
    return [_rules_of(report.rsplit("Content analysis details:", 1)[1]) for report in reports]


def _rules_of(report: str) -> dict[str, float]:
    """The rules of one report's table: the lines between its dashed rule and a blank line."""
    table = report.split("\n---- ", 1)[1].split("\n", 1)[1].split("\n\n", 1)[0]
    return {name: float(points) for points, name in _RULE.findall(table) if float(points) > 0}


def _demo_inbox(tmp_path: Path) -> list[Path]:
    for folder in ("config", "seeds", "templates"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env |= {"DIGESTBOT_PATHS__DUMP_DIR": str(tmp_path / "seeds"), "DIGESTBOT_PATHS__TAGS_FILE": "config/tags.toml"}
    subprocess.run([DIGESTBOT, "demo"], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300)
    return sorted((tmp_path / "var" / "inbox").glob("*.eml"))


def _worst_case(tmp_path: Path) -> bytes:
    """30 entries of long LaTeX titles, many authors and tags, long abstracts full of
    links and quotes, for a subscriber with a phrase filter, with https unsubscribe links."""
    mailer = Mailer(
        Parts(
            settings_for(
                tmp_path,
                sender={"from_address": "digest@bot.example", "from_name": "Research Digest"},
                web={"public_url": "https://digest.example.org", "signing_key": "spam-test-key-0123456789"},
            )
        )
    )
    items = tuple(
        digest_item(
            key=f"k{n}",
            kind=EntryKind.PAPER,
            title=f'Scaling $O(n \\log n)$ "sparse attention" kernels, part {n}: ' + "a study of GPUs " * 6,
            authors=tuple(f"Author{a} Surname{a}" for a in range(20)),
            published=date(2026, 6, 14),
            summary=(
                f"We present kernel {n} for sparse attention on GPUs, reaching $2.5\\times$ at "
                f"https://github.com/org/repo{n} and https://huggingface.co/org/model{n}. "
            )
            * 12,
            summary_type="text/plain",
            tags=("gpu", "llm", "attention", "kernels", "sparsity"),
            why='"sparse attention": phrase in title and summary',
            arxiv_id=f"2606.{n:05d}",
            doi=None,
            links=(),
        )
        for n in range(30)
    )
    subscriber = reader(9, name='Ada "Countess" Lovelace', filter='"sparse attention" or gpu')
    content = DigestContent(
        digest_id=3, kind="scheduled", local_date=date(2026, 6, 15), subscriber=subscriber, items=items
    )
    links, unsubscribe = mailer.links_for_token(make_token(mailer.key, 9, subscriber.unsubscribe_secret))
    rendered = mailer.renderer.render(content, links)
    message_id = message_id_for(3, 9, content.local_date, "scheduled", mailer.settings.sender)
    headers = Headers(subscriber.name, subscriber.email, message_id, datetime(2026, 6, 15, 7, tzinfo=UTC), unsubscribe)
    return build_message(rendered, headers, mailer.settings.sender).as_bytes()


def test_no_digest_collects_spam_points_of_its_own(tmp_path: Path) -> None:
    messages = {path.name: path.read_bytes() for path in _demo_inbox(tmp_path / "demo")}
    assert len(messages) == 9
    messages["worst case"] = _worst_case(tmp_path)
    scores = dict(zip(messages, positive_rules_of_each(list(messages.values()), tmp_path), strict=True))
    print(f"\nSpamAssassin positive rules: {scores}")
    too_many = {name: rules for name, rules in scores.items() if sum(rules.values()) > MOST_POINTS}
    assert not too_many, too_many
