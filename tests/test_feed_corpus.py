"""Every file of feedparser's own test corpus (``../shared/corpora/feedparser-tests``)
is ingested or recorded as failed with one line: no traceback, no hang, no file
that takes more than a moment.  UTF-16 and UTF-32 feeds are read, an item without
a title takes one from its text, and one without either is left out alone."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.domain import SourceStatus
from bot.ingest.formats import looks_like_feed, parse_any
from bot.ingest.storing import ingest_file
from tests.conftest import ROOT

CORPUS = ROOT.parent / "shared" / "corpora" / "feedparser-tests"


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"the corpus is not at {CORPUS} (../shared beside the checkout)")
def test_the_feedparser_corpus_is_ingested_or_failed_cleanly(
    factory: sessionmaker[Session], capsys: pytest.CaptureFixture[str]
) -> None:
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.name != "LICENSE")
    assert len(files) > 1000
    counts = {SourceStatus.INGESTED: 0, SourceStatus.DUPLICATE: 0, SourceStatus.FAILED: 0}
    slowest = (0.0, "")
    for path in files:
        start = time.perf_counter()
        result = ingest_file(factory, path)
        spent = time.perf_counter() - start
        slowest = max(slowest, (spent, path.name))
        counts[result.status] += 1
        if result.status is SourceStatus.FAILED:
            assert result.error and "\n" not in result.error and "internal error" not in result.error, result.error
            assert len(result.error) <= 400 + len(result.path) + 2, result.error
    with capsys.disabled():
        print(
            f"\nfeedparser corpus: {len(files)} files, {counts[SourceStatus.INGESTED]} ingested, "
            f"{counts[SourceStatus.DUPLICATE]} duplicates, {counts[SourceStatus.FAILED]} failed; "
            f"slowest {slowest[1]} {slowest[0]:.2f} s"
        )
    assert slowest[0] < 5
    # Wide encodings and description-only items are read; what fails is CDF and an empty document.
    assert counts[SourceStatus.FAILED] <= 20


RSS = """<?xml version="1.0" encoding="{encoding}"?>
<rss version="2.0"><channel><title>t</title>
<item><title>Kernel fusion for LLM serving</title><guid>a</guid><description>first</description></item>
<item><guid>b</guid><description>&lt;p&gt;A description-only item about &lt;b&gt;sparse attention&lt;/b&gt; on GPUs,
long enough that its title has to be cut somewhere before the end of it.&lt;/p&gt;</description></item>
<item><guid>line-one
Bcc: evil@x.example
{pad}</guid></item>
</channel></rss>"""


@pytest.mark.parametrize("codec", ["utf-8", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
def test_wide_encodings_and_untitled_items(codec: str, caplog: pytest.LogCaptureFixture) -> None:
    declared = codec.split("-l")[0].split("-b")[0]
    data = RSS.format(encoding=declared, pad="A" * 400).encode(codec)
    assert looks_like_feed(data)
    parsed = parse_any(data, "wide.xml")
    titles = [e.content.title for e in parsed.entries]
    assert titles[0] == "Kernel fusion for LLM serving"
    assert titles[1].startswith("A description-only item about sparse attention on GPUs") and titles[1].endswith("…")
    assert len(titles[1]) <= 80 and len(titles) == 2
    (skipped,) = parsed.skipped
    assert "\n" not in skipped and "has no title and no text" in skipped and len(skipped) < 160, skipped


def test_a_json_feed_item_without_a_title_or_text_is_left_out() -> None:
    feed = {
        "version": "https://jsonfeed.org/version/1.1",
        "items": [
            {"id": "x\n" * 200, "content_text": ""},
            "not an object",
            {"id": "2", "content_text": "Only text here"},
        ],
    }
    parsed = parse_any(json.dumps(feed).encode("utf-16"), "f.json")
    assert [e.content.title for e in parsed.entries] == ["Only text here"]
    assert len(parsed.skipped) == 2 and all("\n" not in s and len(s) < 160 for s in parsed.skipped)


def test_a_feed_whose_every_item_is_left_out_is_still_read() -> None:
    """Never the whole feed for its items: it is stored (nothing new), each item warned about."""
    feed = {"version": "https://jsonfeed.org/version/1.1", "items": [{"id": "1"}, 7]}
    parsed = parse_any(json.dumps(feed).encode(), "f.json")
    assert parsed.entries == () and len(parsed.skipped) == 2
