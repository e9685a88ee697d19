"""What lands in the dump folder cannot stop, slow down or blow up ingest.

Symlinks out of the folder, names that are not UTF-8 or carry line breaks,
symlink loops, lines shaped to make a regular expression backtrack, and files
of millions of tiny blocks: each costs at most one ``failed`` row with a one-line
reason, in linear time and bounded memory, and the files after it are ingested.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.domain import DigestItem, EntryKind, SourceStatus
from bot.ingest.formats import parse_any
from bot.ingest.formats.format_errors import SourceFormatError
from bot.ingest.storing import ingest_file
from bot.ingest.watcher import expand, scan_folder
from bot.mail.prose import html_to_text, marks_pattern, summary_of
from bot.store.sources import list_sources
from tests.conftest import ROOT, copy_aged
from tests.helpers import INGEST_MEMORY_PROBE, digest_item, dump_of_size

SEEDS = sorted((ROOT / "seeds").glob("*.txt"))
SEED = SEEDS[0]


def age(path: Path) -> None:
    os.utime(path, ns=(0, 1_000_000_000), follow_symlinks=False)


def test_the_watcher_reads_no_symlink(factory: sessionmaker[Session], dump_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n", encoding="utf-8")
    (dump_dir / "032_passwd.txt").symlink_to(secret)
    (dump_dir / "033_seed.txt").symlink_to(SEED)  # even a link to a real dump: it could be swapped
    copy_aged(SEED, dump_dir, "100_real.txt")
    results = scan_folder(factory, dump_dir, quiet_seconds=0)
    assert [Path(r.path).name for r in results] == ["100_real.txt"]
    with factory() as session:
        sources = list_sources(session)
    assert all("root:x" not in (s.error or "") for s in sources) and len(sources) == 1


def test_an_explicit_link_is_followed_and_a_loop_is_one_failure(factory: sessionmaker[Session], tmp_path: Path) -> None:
    link = tmp_path / "link.txt"
    link.symlink_to(SEED)
    loop = tmp_path / "LOOP"
    loop.symlink_to(loop)
    results = [ingest_file(factory, p) for p in expand([loop, link])]
    assert [r.status for r in results] == [SourceStatus.FAILED, SourceStatus.INGESTED]
    assert results[0].error is not None and "symlink loop" in results[0].error and "\n" not in results[0].error


def test_a_name_that_is_not_utf8_costs_one_failed_row(factory: sessionmaker[Session], dump_dir: Path) -> None:
    odd = os.path.join(os.fsencode(dump_dir), b"a\xff.txt")
    with open(odd, "wb") as handle:
        handle.write(SEED.read_bytes())
    age(Path(os.fsdecode(odd)))
    copy_aged(SEEDS[1], dump_dir, "b.txt")
    results = scan_folder(factory, dump_dir, quiet_seconds=0)
    assert [r.status for r in results] == [SourceStatus.FAILED, SourceStatus.INGESTED]
    assert results[0].error is not None and "a\\xff.txt" in results[0].error and "not UTF-8" in results[0].error
    assert scan_folder(factory, dump_dir, quiet_seconds=0) == []  # recorded once, not retried
    with factory() as session:
        assert [s.path.endswith("a\\xff.txt") for s in list_sources(session)] == [True, False]


def test_a_name_with_a_line_break_is_stored_escaped(factory: sessionmaker[Session], dump_dir: Path) -> None:
    copy_aged(SEED, dump_dir, "new\nline\x1b[31m.txt")
    (result,) = scan_folder(factory, dump_dir, quiet_seconds=0)
    assert result.status is SourceStatus.INGESTED and result.path.endswith("new\\nline\\x1b[31m.txt")
    assert scan_folder(factory, dump_dir, quiet_seconds=0) == []


# --- linear time ------------------------------------------------------------------

MB = 1_000_000
LONG = MB


def shapes() -> dict[str, bytes]:
    """1 MB lines of each shape that makes some parser regex backtrack."""
    x = "x" + " " * LONG + "y"
    return {
        "paper meta: spaces then no date": f"Title\n\n{x}\n\nsummary\n\nPDF\n",
        "paper meta: spaces before the date": f"Title\n\nAda{' ' * LONG}2026-06-14\n\nsummary\n\nPDF\n",
        "repo meta: long stars, no language": f"o/r\n\nowner 2026-06-14 {'1,' * (LONG // 2)}x\n\nsummary\n\nCode\n",
        "repo meta: spaces everywhere": f"o/r\n\nowner{' ' * LONG}2026-06-14{' ' * LONG}x\n\nsummary\n\nCode\n",
        "repo counts": f"o/r\n\nowner 2026-06-14 5 Go\n{'1' * LONG} {'2' * LONG}x\n\nsummary\n\nCode\n",
        "urls": f"Title\n\nAda 2026-06-14\n\n{'http://' * (LONG // 7)}\n\nPDF\n",
        "blank-ish lines": "Title\n\nAda 2026-06-14\n\nsummary" + "\n \t" * (LONG // 3) + "\n\nPDF\n",
        "header": "Filtered by: " + " × " * (LONG // 3) + "\n\nT\n\nA 2026-06-14\n\ns\n\nPDF\n",
        "json feed: arXiv prefix and GitHub link": json.dumps(
            {
                "version": "https://jsonfeed.org/version/1.1",
                "items": [
                    {
                        "id": "arxiv:" + " " * LONG,
                        "title": "t",
                        "url": "https://github.com/a/" + "b" * LONG + "!",
                        "content_text": "arXiv:" + "x" * LONG + " Announce Type:" + " " * LONG,
                    }
                ],
            }
        ),
        "json feed: DOI and arXiv ids": json.dumps(
            {
                "version": "https://jsonfeed.org/version/1.1",
                "items": [
                    {
                        "id": "x",
                        "title": "t",
                        "external_url": "10.1234/" * (LONG // 8),
                        "content_text": "arxiv:a" * (LONG // 7),
                    }
                ],
            }
        ),
    }


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    try:
        work()
    except SourceFormatError:
        pass
    return time.perf_counter() - start


def linear(work: Callable[[], object], baseline: float) -> bool:
    """Whether *work* takes at most ten times *baseline* and half a second: a ratio within
    one run, with room for a noisy machine (measured again once before it is called
    slow), where a superlinear reader is hundreds of times off."""
    return any(timed(work) <= 10 * baseline + 0.5 for _ in range(2))


def test_every_parser_regex_runs_in_linear_time() -> None:
    normal = dump_of_size(MB)
    baseline = min(timed(lambda: parse_any(normal, "normal.txt")) for _ in range(3))
    slow = {}
    for shape, text in shapes().items():
        data = text.encode()
        if not linear(lambda data=data, shape=shape: parse_any(data, shape), baseline):
            slow[shape] = round(timed(lambda data=data, shape=shape: parse_any(data, shape)) / baseline, 1)
    assert not slow, f"times a normal 1 MB dump ({baseline:.3f} s): {slow}"


def test_html_to_text_is_linear_on_unclosed_tags() -> None:
    normal = "<p>" + "word " * (LONG // 5) + "</p>"
    baseline = min(timed(lambda: html_to_text(normal)) for _ in range(3))
    assert linear(lambda: html_to_text("<br" * (LONG // 3)), baseline)


def test_summaries_and_marks_are_linear_on_hostile_html_and_latex() -> None:
    marks = marks_pattern(("kv cache", "gpu"))
    normal = "<p>" + "kv cache word " * (LONG // 14) + "</p>"
    baseline = min(timed(lambda: summary_of(_html_item(normal).content, 400, marks)) for _ in range(3))
    for shape in (
        "<a href='" * (LONG // 9),
        '<"' * (LONG // 2),
        "\\alpha" * (LONG // 6),
        "\\mu" + " " * LONG,
        "$" * LONG,
        ". " * (LONG // 2),
        "kv " * (LONG // 3),
        "<p>" + "kv-" * (LONG // 3),
    ):
        for kind in ("text/html", "text/plain"):
            assert linear(
                lambda shape=shape, kind=kind: summary_of(_html_item(shape, kind).content, 400, marks), baseline
            ), (
                shape[:20],
                kind,
            )


def _html_item(summary: str, kind: str = "text/html") -> DigestItem:
    return digest_item(
        key="k", kind=EntryKind.PAPER, title="t", authors=(), published=None, summary=summary,
        summary_type=kind, tags=(), why="", arxiv_id=None, doi=None, links=(),
    )  # fmt: skip


# --- bounded memory ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["blank blocks", "one huge summary", "tiny entries", "normal"])
def test_peak_memory_is_bounded_by_size_and_entries(tmp_path: Path, shape: str) -> None:
    """README: peak RSS grows by at most 8 x the file size + 3 KB per entry stored."""
    if shape == "blank blocks":
        data = b"a\n\n" * (10 * MB // 3)
    elif shape == "one huge summary":
        data = b"Title\n\nAda 2026-06-14\n\n" + b"a\n\n" * (10 * MB // 3) + b"PDF\n"
    elif shape == "tiny entries":
        data = b"".join(b"T%d\n\nA 2026-06-14\n\ns\n\nPDF\n\n" % i for i in range(30_000))
    else:
        data = dump_of_size(5 * MB)
    dump = tmp_path / "dump.txt"
    dump.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-c", INGEST_MEMORY_PROBE, str(dump), str(tmp_path / "s.sqlite3")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    measured = json.loads(proc.stdout)
    assert measured["growth"] <= 8 * len(data) + 3000 * measured["entries"], (measured, len(data))


def test_a_folder_that_cannot_be_listed_is_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    unreadable = tmp_path / "locked"
    unreadable.mkdir()
    unreadable.chmod(0)
    if os.access(unreadable, os.R_OK):  # root reads any folder: use one the kernel refuses even to root
        unreadable = Path("/proc/1/map_files")
        try:
            os.listdir(unreadable)
            pytest.skip("no folder here that cannot be listed")
        except PermissionError:
            pass
        except OSError:
            pytest.skip("no folder here that cannot be listed")
    assert expand([unreadable, SEED]) == [SEED]
    assert "cannot list the folder" in caplog.text
