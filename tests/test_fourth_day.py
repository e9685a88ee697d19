"""Issue 76, what a newcomer tripped on: each item a test that failed before."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

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


def test_an_arxiv_category_is_a_source_in_one_line_and_a_quiet_day_sends_nothing(tmp_path: Path) -> None:
    """Item 8: `arxiv:cs.LG+cs.CL` in the feeds list is arXiv's own RSS of those categories
    (rss.arxiv.org's shapes: new, cross-list, replace; an empty holiday feed)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from bot.tools.sink import Sink, SinkHandler
    from tests.conftest import ROOT
    from tests.helpers import Cli

    fixtures = ROOT / "tests" / "fixtures"
    served = {"day": "arxiv_day1.rss"}
    asked: list[str] = []

    class Arxiv(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.path)
            body = (fixtures / served["day"]).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/rss+xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Arxiv)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Sink(SinkHandler()) as sink:
            env = {
                "DIGESTBOT_FEEDS__URLS": '["arxiv:cs.LG+cs.CL"]',
                "DIGESTBOT_FEEDS__ARXIV_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}",
                "DIGESTBOT_SMTP__PORT": str(sink.port),
            }
            cli = Cli(tmp_path, env)
            (tmp_path / "dumps").mkdir()
            fetched = cli("feeds", "fetch").stdout
            assert asked == ["/rss/cs.LG+cs.CL"] and "new" in fetched, fetched
            cli("subscribers", "add", "ada@example.org", "--tz", "UTC", "--hour", "0", "--backfill", "all")
            cli("run", "--once", "--all-due")
            assert len(sink.received) == 1
            served["day"] = "arxiv_holiday.rss"  # arXiv announces nothing: an empty feed
            said = cli("feeds", "fetch").stdout
            assert "0 entries" in said and "failed" not in said, said
            cli("subscribers", "add", "bo@example.org", "--tz", "UTC", "--hour", "0", "--backfill", "none")
            cli("run", "--once", "--all-due")
            assert [r.recipients for r in sink.received] == [["ada@example.org"]]  # no mail on a quiet day
            refused = cli("feeds", "fetch", "arxiv:cz.LG", code=2).stderr
            assert refused.strip() == "error: 'arxiv:cz.LG': 'cz' is not an arXiv archive; did you mean 'cs'?"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("source", "url"),
    [
        ("arxiv:cs.LG", "https://rss.arxiv.org/rss/cs.LG"),
        ("arxiv:cs.LG+cs.CL", "https://rss.arxiv.org/rss/cs.LG+cs.CL"),
        ("ARXIV:cond-mat.mes-hall", "https://rss.arxiv.org/rss/cond-mat.mes-hall"),
        (" arxiv:astro-ph.CO+hep-th ", "https://rss.arxiv.org/rss/astro-ph.CO+hep-th"),
    ],
)
def test_arxiv_sources_name_arxivs_feed(source: str, url: str) -> None:
    from bot.domain.arxiv_sources import feed_url

    assert feed_url(source) == url


@pytest.mark.parametrize(
    "source", ["arxiv:", "arxiv:cs.LG+", "arxiv:cz.LG", "arxiv:cs.L", "arxiv:cs.LG/../x", "arxiv:+"]
)
def test_a_source_that_is_no_arxiv_category_is_one_line(source: str) -> None:
    from bot.domain.arxiv_sources import ArxivSourceError, feed_url

    with pytest.raises(ArxivSourceError) as refused:
        feed_url(source)
    assert "\n" not in str(refused.value) and source.strip() in str(refused.value)


def test_previews_and_the_manage_sentence_agree_with_what_was_sent(tmp_path: Path) -> None:
    """Item 5: right after a digest, the manage page said "nothing new has arrived since 24
    November" (its window's start); `preview --all` showed "sends at" as the moment it ran
    for every reader and listed entries for readers who had that day's digest already."""
    import json
    from datetime import UTC, datetime, time

    from bot.tools.sink import Sink, SinkHandler
    from tests.conftest import SEEDS
    from tests.helpers import Cli

    with Sink(SinkHandler()) as sink:
        cli = Cli(tmp_path, {"DIGESTBOT_SMTP__PORT": str(sink.port)})
        (tmp_path / "dumps").mkdir()
        cli("dumps", "ingest", str(SEEDS))
        cli("subscribers", "add", "ada@example.org", "--tz", "UTC", "--hour", "0", "--backfill", "all")
        from zoneinfo import ZoneInfo

        # A zone where 23:00 is still to come today: its digest is not due yet.
        zone = next(z for z in ("America/Los_Angeles", "Asia/Tokyo") if datetime.now(ZoneInfo(z)).hour <= 21)
        cli("subscribers", "add", "la@example.org", "--tz", zone, "--hour", "23", "--filter", "gpu")
        cli("run", "--once")
        assert [r.recipients for r in sink.received] == [["ada@example.org"]]
        today = datetime.now(UTC).date().isoformat()
        said = " ".join(cli("preview", "ada@example.org").stdout.split())
        assert "since their digest of" in said, said
        rows = {row["email"]: row for row in map(json.loads, cli("preview", "--all", "--json").stdout.splitlines())}
        assert rows["ada@example.org"]["state"] == "sent" and rows["ada@example.org"]["entries"] > 0
        assert rows["ada@example.org"]["send_at"].startswith(f"{today}T00:00")
        day = datetime.now(UTC).date()  # preview --all's day
        later = datetime.combine(day, time(23), ZoneInfo(zone)).astimezone(UTC)
        assert rows["la@example.org"]["state"] == "" and rows["la@example.org"]["send_at"].startswith(
            later.isoformat()[:16]
        ), rows


def test_a_why_line_never_points_at_words_the_reader_cannot_see() -> None:
    """Item 1: "Matches your filter: its summary mentions gpu and llm" stood on entries
    whose shown text held neither word (they were in the part of the abstract cut)."""
    from bot.mail.why import reader_why

    pinned = "gpu: tag (header; rule: title, summary); llm: tag (header; rule: summary)"
    assert reader_why(pinned) == "Matches your filter: its title and summary mention gpu; its summary mentions llm"
    assert reader_why(pinned, summary_cut=True) == (
        "Matches your filter: its title and full abstract mention gpu; its full abstract mentions llm"
    )
