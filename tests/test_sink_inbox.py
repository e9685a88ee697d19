"""The built-in sink's inbox (``digestbot sink``, the demo): each message read once, when
it arrives, whatever the folder already holds (issue 76, item 7: it slowed as its folder
grew, every message reading every earlier one again to write the index)."""

from __future__ import annotations

import smtplib
from email.message import EmailMessage
from pathlib import Path

import pytest

from bot.tools.inbox_index import INDEX_NEWEST, last_number, write_index
from bot.tools.sink import Sink, SinkHandler


def digest_message(n: int) -> bytes:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "bot@example.org", f"r{n}@example.org", f"Digest {n}"
    message["Date"] = "Mon, 07 Dec 2026 09:00:00 +0000"
    message.set_content("text")
    message.add_alternative(f"<p>digest {n}</p>", subtype="html")
    return message.as_bytes()


def test_a_message_reads_no_earlier_one_and_the_index_lists_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(1, INDEX_NEWEST + 21):
        (tmp_path / f"{n:04d}.eml").write_bytes(digest_message(n))
    handler = SinkHandler(inbox=tmp_path, keep_index=True, first_number=last_number(tmp_path))
    reads: list[str] = []
    original = Path.read_bytes

    def counted(path: Path) -> bytes:
        if path.suffix == ".eml":
            reads.append(path.name)
        return original(path)

    monkeypatch.setattr(Path, "read_bytes", counted)
    with Sink(handler) as sink, smtplib.SMTP("127.0.0.1", sink.port) as client:
        for n in range(3):
            client.sendmail("bot@example.org", [f"new{n}@example.org"], digest_message(1000 + n))
    assert reads == []  # before: every .eml in the folder, again at each message
    index = (tmp_path / "index.html").read_text()
    assert f"{INDEX_NEWEST + 23} messages (the newest {INDEX_NEWEST} listed)" in index
    assert index.index("Digest 1002") < index.index("Digest 1001") < index.index(f"Digest {INDEX_NEWEST + 20}")
    assert "Digest 20<" not in index  # older than the newest listed
    assert (tmp_path / f"{INDEX_NEWEST + 23:04d}.html").exists()


def test_a_message_the_email_package_cannot_read_is_listed_by_its_name(tmp_path: Path) -> None:
    broken = b"Subject: x\r\nContent-Type: text/html; charset=no-such-charset\r\n\r\n<p>x</p>\r\n"
    (tmp_path / "0001.eml").write_bytes(broken)
    (tmp_path / "0002.eml").write_bytes(digest_message(2))
    index = write_index(tmp_path).read_text()
    assert "(unreadable)" in index and "0001.eml" in index and "Digest 2" in index
