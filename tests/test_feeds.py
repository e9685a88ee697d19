"""Feeds: RSS (arXiv), Atom and JSON Feed fixtures, and fetching over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import Announce, EntryKind, SourceStatus
from bot.ingest.formats import FeedFormatError, parse_feed
from bot.ingest.storing import ingest_bytes, ingest_file
from bot.ingest.watcher import fetch_feeds
from bot.store.entry_reads import appearances_of, find_entry, list_entries
from tests.conftest import FIXTURES
from tests.seed_facts import MINIMAX


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_arxiv_rss_items_are_keyed_by_id_without_version() -> None:
    parsed = parse_feed(fixture("arxiv_day1.rss"), "day1")
    assert parsed.format == "rss"
    first, cross, replace = parsed.entries
    assert (first.content.arxiv_id, first.announce) == ("2606.01234", Announce.NEW)
    assert first.content.authors == ("Grace Hopper", "Edsger Dijkstra")
    assert first.tags == ("cs.DC", "cs.LG")
    assert first.content.published == date(2026, 6, 15)
    assert (
        first.content.summary
        == r"We present an elastic KV cache that offloads to host memory, cutting GPU memory by $2.5\times$."
    )
    assert (cross.content.arxiv_id, cross.announce) == ("2606.04321", Announce.CROSS)
    assert (replace.content.arxiv_id, replace.announce) == ("2511.00042", Announce.REPLACE)


def test_replace_of_a_known_id_updates_and_is_not_new(factory: sessionmaker[Session]) -> None:
    day1 = ingest_bytes(factory, fixture("arxiv_day1.rss"), name="day1")
    # A replace of an id the store never saw is new to the store.
    assert (day1.entries, day1.new) == (3, 3)
    day2 = ingest_bytes(factory, fixture("arxiv_day2.rss"), name="day2")
    assert (day2.entries, day2.new, day2.updated) == (2, 1, 1)
    with factory() as s:
        revised = find_entry(s, "arXiv:2606.01234v2")
        assert revised is not None
        assert revised.key == "arxiv:2606.01234"
        assert revised.content.title == "Elastic KV-Cache Offloading for Multi-Tenant LLM Serving Systems"
        assert revised.content.authors == ("Grace Hopper", "Edsger Dijkstra", "Ada Lovelace")
        assert revised.content.summary == "Revised: the elastic KV cache now also offloads to NVMe."
        assert len(appearances_of(s, revised.id)) == 2
        assert revised.tags == ("cs.DC", "cs.LG")


def test_paper_from_a_dump_then_a_feed_is_one_entry(factory: sessionmaker[Session], seed_files: list[Path]) -> None:
    ingest_file(factory, seed_files[0])
    result = ingest_bytes(factory, fixture("arxiv_day1.rss"), name="day1")
    assert result.new == 2  # MiniMax matched by normalized title
    with factory() as s:
        minimax = find_entry(s, "2606.04321")
        assert minimax is not None and minimax.content.title == MINIMAX
        assert minimax.key.startswith("paper:")  # keys are stable once given
        assert minimax.content.arxiv_id == "2606.04321"
        assert "https://arxiv.org/abs/2606.04321" in minimax.content.links
        assert len([e for e in list_entries(s) if e.content.title == MINIMAX]) == 1


def test_atom_feed_categories_become_tags_and_doi_keys(factory: sessionmaker[Session]) -> None:
    parsed = parse_feed(fixture("journal.atom"), "atom")
    assert parsed.format == "atom"
    article, repo = parsed.entries
    assert article.content.doi == "10.5555/jsr.2026.17"
    assert article.tags == ("moe", "Scheduling")
    assert article.content.authors == ("Leslie Lamport", "Nancy Lynch")
    assert article.content.summary_type == "text/html"
    assert (repo.content.kind, repo.repo) == (EntryKind.REPO, "vllm-project/vllm")
    ingest_bytes(factory, fixture("journal.atom"), name="atom")
    with factory() as s:
        stored = find_entry(s, "doi:10.5555/jsr.2026.17")
        assert stored is not None and stored.tags == ("moe", "Scheduling")
        assert find_entry(s, "repo:vllm-project/vllm") is not None


def test_json_feed(factory: sessionmaker[Session]) -> None:
    parsed = parse_feed(fixture("picks.json"), "json")
    assert parsed.format == "jsonfeed"
    compilers, notes = parsed.entries
    assert (compilers.content.arxiv_id, compilers.tags, compilers.content.authors) == (
        "2606.09999",
        ("compilers", "GPU"),
        ("Frances Allen",),
    )
    assert compilers.content.summary == "A compiler that targets 2:4 sparsity, reaching 149 μs per layer."
    assert compilers.content.published == date(2026, 6, 15)
    assert (notes.content.summary_type, notes.content.authors) == ("text/html", ("Butler Lampson",))
    result = ingest_bytes(factory, fixture("picks.json"), name="json")
    assert (result.status, result.new) == (SourceStatus.INGESTED, 2)
    with factory() as s:
        assert [e.content.title for e in list_entries(s, tag="gpu")] == ["Compilers for Sparse Tensor Cores"]


def test_a_dump_whose_first_title_starts_with_a_bracket_is_not_a_feed() -> None:
    from bot.ingest.formats import looks_like_feed

    assert not looks_like_feed(b"<Title> of a paper\n\nA 2026-01-01\n\nS\n\nPDF")
    assert not looks_like_feed(b"{Braces} in a title\n\nA 2026-01-01\n\nS\n\nPDF")
    assert looks_like_feed(b"\xef\xbb\xbf  <?xml version='1.0'?><rss/>")
    assert looks_like_feed(b'{\n  "version": "https://jsonfeed.org/version/1.1"}')


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"<?xml version='1.0'?><html><body>not a feed</body></html>", "not an RSS or Atom feed"),
        (b'{"version": "1.0", "items": []}', "not a JSON Feed"),
        (b'{"version": ', "invalid JSON"),
    ],
)
def test_bad_feeds_fail_with_one_line(data: bytes, message: str) -> None:
    with pytest.raises(FeedFormatError) as info:
        parse_feed(data, "bad")
    assert message in str(info.value) and "\n" not in str(info.value)


# --- fetching over HTTP -------------------------------------------------------


class _FeedHandler(BaseHTTPRequestHandler):
    requests: list[tuple[str, str | None]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server calls do_<METHOD> by name
        _FeedHandler.requests.append((self.path, self.headers.get("If-None-Match")))
        if self.path == "/feed.rss":
            if self.headers.get("If-None-Match") == '"v1"':
                self.send_response(304)
                self.end_headers()
                return
            body = fixture("arxiv_day1.rss")
            self.send_response(200)
            self.send_header("ETag", '"v1"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/huge":
            self.send_response(200)
            self.end_headers()
            for _ in range(64):
                self.wfile.write(b"<" * 65536)
        elif self.path == "/slow":
            time.sleep(2)
            self.send_response(200)
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()


@pytest.fixture
def feed_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FeedHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _FeedHandler.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_uses_etag_and_ingests_once(factory: sessionmaker[Session], feed_server: str) -> None:
    settings = Settings()
    url = f"{feed_server}/feed.rss"
    (first,) = fetch_feeds(factory, settings, urls=[url])
    (second,) = fetch_feeds(factory, settings, urls=[url])
    assert (first.status, first.new) == (SourceStatus.INGESTED, 3)
    assert second.status is SourceStatus.NOT_MODIFIED
    assert _FeedHandler.requests == [("/feed.rss", None), ("/feed.rss", '"v1"')]


def test_fetch_limits_size_and_time(factory: sessionmaker[Session], feed_server: str) -> None:
    settings = Settings.model_validate({"feeds": {"max_bytes": 100_000, "timeout_seconds": 0.5}})
    huge, slow, missing = fetch_feeds(
        factory, settings, urls=[f"{feed_server}/huge", f"{feed_server}/slow", f"{feed_server}/missing"]
    )
    assert huge.status is SourceStatus.FAILED and "feeds.max_bytes=100000" in (huge.error or "")
    assert slow.status is SourceStatus.FAILED and "timed out after 0.5 s" in (slow.error or "")
    assert missing.status is SourceStatus.FAILED and missing.error == f"{feed_server}/missing: HTTP 404"


def test_a_password_in_a_feed_url_is_never_printed_logged_or_stored(tmp_path: Path, feed_server: str) -> None:
    """Issue 47, item 14: `feeds fetch http://user:pw@…` echoed the password."""
    import sqlite3

    from tests.helpers import Cli

    port = feed_server.rsplit(":", 1)[1]
    urls = [f"http://reader:s3cr3t@127.0.0.1:{port}/feed.rss", "http://t0k3n@127.0.0.1:1/feed.rss"]
    cli = Cli(tmp_path, {"DIGESTBOT_FEEDS__URLS": json.dumps(urls)})
    said = cli("-vv", "feeds", "fetch", code=1)
    shown = cli("config", "show").stdout
    listed = cli("dumps", "list", "--json").stdout
    with sqlite3.connect(tmp_path / "cli.sqlite3") as conn:
        stored = " ".join(str(row) for table in ("sources", "feeds") for row in conn.execute(f"SELECT * FROM {table}"))
    for text in (said.stdout, said.stderr, shown, listed, stored):
        assert "s3cr3t" not in text and "t0k3n" not in text, text
    assert f"http://reader:***@127.0.0.1:{port}/feed.rss" in said.stdout and "http://***@127.0.0.1:1/" in said.stderr
