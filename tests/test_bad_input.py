"""Bad input never stops the bot: mutated dumps (hypothesis) and hand-made hostile
files (50 MB, random bytes, wrong encodings, XML bombs, deep nesting, devices)
go through the watcher; each bad one is recorded as failed with a one-line
reason naming the file and is not retried, and the good file after them is ingested.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import tempfile
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.domain import IngestResult, SourceStatus
from bot.ingest.formats.xmlfeed import MAX_XML_ELEMENTS
from bot.ingest.storing import ingest_file
from bot.ingest.watcher import scan_folder
from bot.store.schema import Entry
from tests.conftest import SEEDS
from tests.helpers import render_dump

SEED_BYTES = [p.read_bytes() for p in sorted(SEEDS.glob("*.txt"))]
_unique = itertools.count()


def good_dump() -> bytes:
    n = next(_unique)
    return render_dump(
        [(f"A perfectly good paper number {n} {os.getpid()}", ["Ada Lovelace"], date(2026, 6, 14), "Fine.")]
    ).encode()


def check_results(results: list[IngestResult], good_name: str) -> None:
    """Every file has an outcome; failures say which file and why, on one line; the good file got in."""
    for result in results:
        assert result.status in (SourceStatus.INGESTED, SourceStatus.FAILED, SourceStatus.DUPLICATE), result
        if result.status is SourceStatus.FAILED:
            assert result.error and "\n" not in result.error and "\r" not in result.error, result
            assert result.error.startswith(result.path), result
            assert "internal error" not in result.error, result  # a parser bug, not a verdict on the input
            assert len(result.error) < 600
    (good,) = [r for r in results if r.path.endswith(good_name)]
    assert good.status is SourceStatus.INGESTED and good.new == 1, good


# --- hypothesis: mutations of real dumps ------------------------------------------------


@st.composite
def mutated_dump(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEED_BYTES)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["truncate", "flip", "insert", "huge_line", "reencode", "shuffle", "nul", "crlf"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "truncate":
            del data[at:]
        elif op == "flip":
            for i in draw(st.lists(st.integers(0, max(len(data) - 1, 0)), max_size=20)):
                if data:
                    data[i] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(max_size=200))
        elif op == "huge_line":
            data[at:at] = b"x" * draw(st.integers(10_000, 2_000_000))
        elif op == "reencode":
            text = bytes(data).decode("utf-8", "replace")
            data = bytearray(
                text.encode(draw(st.sampled_from(["utf-16", "utf-32", "latin-1", "cp1252", "utf-7"])), "replace")
            )
        elif op == "shuffle":
            blocks = bytes(data).split(b"\n\n")
            random.Random(at).shuffle(blocks)
            data = bytearray(b"\n\n".join(blocks))
        elif op == "nul":
            data[at:at] = b"\x00"
        elif op == "crlf":
            data = bytearray(bytes(data).replace(b"\n", draw(st.sampled_from([b"\r\n", b"\r", b"\n\r", b"\x0b"]))))
    return bytes(data)


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
@given(st.lists(mutated_dump(), min_size=1, max_size=4))
def test_mutated_dumps_never_stop_the_watcher(factory: sessionmaker[Session], files: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i, data in enumerate(files):
            (folder / f"a-{i}.txt").write_bytes(data)
        (folder / "z-good.txt").write_bytes(good_dump())
        results = scan_folder(factory, folder, quiet_seconds=0)
        assert len(results) == len(files) + 1
        check_results(results, "z-good.txt")
        assert scan_folder(factory, folder, quiet_seconds=0) == []  # failures are not retried until they change


# --- hand-made hostile files -------------------------------------------------------------

BOMB = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + b"".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">'.encode() for i in range(1, 10))
    + b']><rss version="2.0"><channel><title>bomb</title><item><title>&lol9;</title>'
    b"<link>https://a.example/1</link></item></channel></rss>"
)
EXTERNAL = (
    b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    b'<rss version="2.0"><channel><title>x</title><item><title>t &x;</title><link>https://a.example/2</link></item></channel></rss>'
)
QUADRATIC = (
    b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "'
    + b"A" * 50_000
    + b'">]><rss version="2.0"><channel><title>q</title>'
    b"<item><title>q " + b"&a;" * 2_000 + b"</title><link>https://a.example/3</link></item></channel></rss>"
)


def _big_feed(entries: int) -> bytes:
    items = "".join(
        f"<item><title>Feed entry {i} of many</title><link>https://feed.example/{i}</link><guid>g{i}</guid>"
        f"<description>Summary {i}</description><category>Bulk</category></item>"
        for i in range(entries)
    )
    return f'<?xml version="1.0"?><rss version="2.0"><channel><title>big</title>{items}</channel></rss>'.encode()


HOSTILE: dict[str, Callable[[], bytes]] = {
    "a01-fifty-megabytes.txt": lambda: b"A" * 50_000_000,
    "a02-random-bytes.txt": lambda: random.Random(1).randbytes(1_000_000),
    "a03-utf16.txt": lambda: SEED_BYTES[0].decode("utf-8").encode("utf-16"),
    "a04-latin1.txt": lambda: "Résumé of a paper\n\nA. B 2026-06-14\n\nsummary\n\nPDF".encode("latin-1"),
    "a05-empty.txt": lambda: b"",
    "a06-bom-only.txt": lambda: b"\xef\xbb\xbf \n\n",
    "a07-truncated.txt": lambda: SEED_BYTES[1][: len(SEED_BYTES[1]) // 2],
    "a08-one-huge-line.txt": lambda: b"Title " + b"word " * 2_000_000,
    "a09-bomb.xml": lambda: BOMB,
    "a10-external-entity.xml": lambda: EXTERNAL,
    "a11-quadratic-blowup.xml": lambda: QUADRATIC,
    "a12-deep-nesting.xml": lambda: (
        b'<?xml version="1.0"?><rss version="2.0"><channel><title>d</title>' + b"<item>" * 100_000 + b"</channel></rss>"
    ),
    "a13-too-many-elements.xml": lambda: (
        b'<?xml version="1.0"?><rss version="2.0"><channel>' + b"<x/>" * (MAX_XML_ELEMENTS + 1) + b"</channel></rss>"
    ),
    "a14-malformed.xml": lambda: (
        b'<?xml version="1.0"?><rss version="2.0"><channel><title>m</title><item><title>Unclosed item</title><link>https://a.example/4</link></itm>'
    ),
    "a15-not-a-feed.xml": lambda: b'<?xml version="1.0"?><html><body>hello</body></html>',
    "a16-deep-json.json": lambda: (
        b'{"version":"https://jsonfeed.org/version/1.1","items":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    ),
    "a17-json-wrong-types.json": lambda: json.dumps(
        {"version": "https://jsonfeed.org/version/1.1", "items": [1, "x", None]}
    ).encode(),
    "a18-json-latin1.json": lambda: (
        '{"version":"https://jsonfeed.org/version/1.1","items":[{"id":"1","title":"Caf\xe9"}]}'.encode("latin-1")
    ),
    "a19-atom-without-entries-titles.xml": lambda: (
        b'<feed xmlns="http://www.w3.org/2005/Atom"><title>t</title><entry><id>1</id></entry></feed>'
    ),
    "a20-thousands-of-entries.xml": lambda: _big_feed(5_000),
}
FAILS_WITH = {
    "a01-fifty-megabytes.txt": "watch.max_file_bytes",
    "a02-random-bytes.txt": "",
    "a03-utf16.txt": "NUL byte",
    "a04-latin1.txt": "not UTF-8",
    "a05-empty.txt": "",
    "a06-bom-only.txt": "",
    "a07-truncated.txt": "",
    "a13-too-many-elements.xml": "XML elements",
    "a15-not-a-feed.xml": "",
    "a16-deep-json.json": "nested too deeply",
    "a18-json-latin1.json": "not UTF-8",
}


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
@pytest.mark.slow
def test_hostile_files_are_quarantined_and_the_good_one_after_them_ingested(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    folder = tmp_path / "dumps"
    folder.mkdir()
    for name, make in HOSTILE.items():
        (folder / name).write_bytes(make())
    (folder / "a21-device-link.txt").symlink_to("/dev/zero")
    os.mkfifo(folder / "a22-fifo.txt")
    (folder / "z-good.txt").write_bytes(good_dump())

    results = scan_folder(factory, folder, quiet_seconds=0, max_bytes=32_000_000)
    print(f"\nbad inputs: {len(HOSTILE) + 2} hand-made files (+ hypothesis mutations of the seeds)")
    by_name = {Path(r.path).name: r for r in results}
    assert set(by_name) == {*HOSTILE, "z-good.txt"}  # the device link and the FIFO are never opened
    check_results(results, "z-good.txt")
    for name, fragment in FAILS_WITH.items():
        assert by_name[name].status is SourceStatus.FAILED, by_name[name]
        assert fragment in (by_name[name].error or ""), by_name[name]
    assert by_name["a20-thousands-of-entries.xml"].new == 5_000
    # Items that have no title or text, or are no JSON objects, are left out one by one, never the feed.
    left_out = ("a12-deep-nesting.xml", "a17-json-wrong-types.json", "a19-atom-without-entries-titles.xml")
    assert [by_name[name].status for name in left_out] == [SourceStatus.INGESTED] * 3
    assert [by_name[name].entries for name in left_out] == [0, 0, 0]
    with factory() as session:
        titles = session.execute(select(Entry.title)).scalars().all()
        summaries = session.execute(select(Entry.summary)).scalars().all()
    assert max(len(t) for t in titles) < 20_000_000  # entity expansion never multiplied anything
    assert not any("root:" in text for text in [*titles, *summaries])  # no external entity was read
    assert scan_folder(factory, folder, quiet_seconds=0) == []

    # A named device is refused, not read.
    refused = ingest_file(factory, Path("/dev/zero"))
    assert refused.status is SourceStatus.FAILED and refused.error == "/dev/zero: not a regular file"
