"""A reader's library: what reference managers export, read into papers keyed as entries
are, matched to stored entries, listed, removed, given back and purged."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.ingest.storing import ingest_bytes
from bot.store.engine import transaction
from bot.store.library import add_papers, library_of, remove_papers
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import remove, save
from bot.taste.library import LibraryFileError, csl_json, read_library
from tests.conftest import ROOT
from tests.helpers import Cli, CliResult

NOW = datetime(2026, 11, 24, 12, tzinfo=UTC)

BIBTEX = r"""% exported by Zotero
@article{snn2023,
  title = {Spiking {Neural} Networks for \emph{Event} Cameras: a Survey of M\"uller's Ideas},
  author = {Ada Lovelace and Grace Hopper},
  abstract = {Spiking neural networks process events with $O(n)$ energy.},
  eprint = {2305.01234},
  archivePrefix = {arXiv},
}

@misc{broken, title = {never closed

@inproceedings{doi-only,
  title = {Neuromorphic accelerators},
  doi = {10.1145/3579371.3589057},
}

@book{no-title, author = {Nobody}}

@article{scholar,
  title={Attention is all you need},
  journal={arXiv preprint arXiv:1706.03762},
}
"""

RIS = "".join(
    line + "\n"
    for line in (
        "TY  - JOUR",
        "TI  - Loihi 2 in practice",
        "AB  - A neuromorphic chip.",
        "DO  - 10.1109/MM.2021.3099999",
        "ER  - ",
        "",
        "TY  - JOUR",
        "UR  - https://arxiv.org/abs/2401.00001v2",
        "T1  - An arXiv paper",
        "ER  - ",
        "",
        "TY  - JOUR",
        "AU  - Someone, Without",
        "ER  - ",
    )
)

CSL = json.dumps(
    [
        {"id": "x", "type": "article", "title": "Event-driven vision", "abstract": "Cameras.", "DOI": "10.1000/ev.1"},
        {"id": "y", "type": "article", "title": "From arXiv", "URL": "https://arxiv.org/abs/2402.00002"},
        "not an object",
        {"id": "z", "type": "article"},
    ]
)


def test_bibtex_with_latex_bad_blocks_and_identifiers() -> None:
    read = read_library(BIBTEX.encode())
    assert read.format == "bibtex"
    assert [p.key for p in read.papers] == ["arxiv:2305.01234", "doi:10.1145/3579371.3589057", "arxiv:1706.03762"]
    first = read.papers[0]
    assert first.title == "Spiking Neural Networks for Event Cameras: a Survey of Müller's Ideas"
    assert first.abstract == "Spiking neural networks process events with O(n) energy."
    assert read.problems == ["line 10: not a BibTeX entry that can be read", "line 17: @book{no-title} has no title"]


def test_ris_csl_json_and_identifier_lists() -> None:
    ris = read_library(RIS.encode())
    assert ris.format == "ris" and [p.key for p in ris.papers] == ["doi:10.1109/mm.2021.3099999", "arxiv:2401.00001"]
    assert ris.papers[0].abstract == "A neuromorphic chip."
    assert ris.problems == ["line 12: record 3 has no title, DOI or arXiv id"]
    csl = read_library(CSL.encode())
    assert [p.key for p in csl.papers] == ["doi:10.1000/ev.1", "arxiv:2402.00002"]
    assert csl.problems == ["item 3: not a CSL-JSON object", "item 4: has no title, DOI or arXiv id"]
    ids = read_library(b"# my papers\n2305.01234v3\narXiv:hep-th/9901001\nhttps://doi.org/10.1000/ABC\nnot an id\n\n")
    assert [p.key for p in ids.papers] == ["arxiv:2305.01234", "arxiv:hep-th/9901001", "doi:10.1000/abc"]
    assert ids.problems == ["line 5: 'not an id' is not an arXiv id or a DOI"]


def test_a_paper_twice_is_read_once_and_what_we_give_back_reads_the_same() -> None:
    read = read_library((BIBTEX + BIBTEX.replace("snn2023", "again")).encode())
    assert len(read.papers) == 3
    again = read_library(csl_json(read.papers).encode())
    assert [(p.key, p.title, p.abstract) for p in again.papers] == [(p.key, p.title, p.abstract) for p in read.papers]
    assert again.problems == []


def test_files_that_cannot_be_read_at_all_are_one_error() -> None:
    for data, said in [
        (b"\xff\xfe\x00garbage", "not UTF-8 text"),
        (b"2305.01234\x00\n", "NUL bytes"),
        (b"x" * 20_000_001, "larger than 20 MB"),
    ]:
        with pytest.raises(LibraryFileError, match=said):
            read_library(data)
    assert read_library(b"[" * 100_000).problems == ["line 1: not JSON (nested too deep)"]


@given(st.binary(max_size=2000))
def test_any_bytes_are_read_or_refused_in_one_line(data: bytes) -> None:
    try:
        read = read_library(data)
    except LibraryFileError as exc:
        assert "\n" not in str(exc)
        return
    assert all("\n" not in p for p in read.problems)
    assert all(p.key.partition(":")[0] in ("arxiv", "doi", "paper") for p in read.papers)


@given(st.sampled_from([BIBTEX, RIS, CSL]), st.integers(0, 2000), st.text(max_size=30))
def test_mutated_exports_are_read_without_error(text: str, at: int, junk: str) -> None:
    at %= len(text)
    try:
        read_library((text[:at] + junk + text[at + len(junk) :]).encode())
    except LibraryFileError:
        pass


def _ada(factory: sessionmaker[Session]) -> int:
    save(factory, Settings(), [clean_fields("ada@example.com")], NOW)
    with factory() as session:
        found = get_subscriber(session, "ada@example.com")
    assert found is not None
    return found.id


# A dump lists papers by title (../shared/DUMPS.md): the library's arXiv paper is matched by it.
DUMP = """Spiking Neural Networks for Event Cameras: A Survey of M\u00fcller's Ideas

A. Lovelace 2026-06-14

A survey.

PDF
""".encode()


def test_papers_are_matched_to_stored_entries_and_removed(factory: sessionmaker[Session]) -> None:
    ingest_bytes(factory, DUMP, name="d", now=NOW)
    ada = _ada(factory)
    read = read_library(BIBTEX.encode())
    with transaction(factory) as session:
        added, over = add_papers(session, ada, read.papers, NOW)
        assert over == 0 and add_papers(session, ada, read.papers, NOW) == ([], 0)
    assert [(p.key, p.entry_id is not None) for p in added] == [
        ("arxiv:2305.01234", True),
        ("doi:10.1145/3579371.3589057", False),
        ("arxiv:1706.03762", False),
    ]
    with transaction(factory) as session:
        assert remove_papers(session, ada, ["arxiv:1706.03762", "arxiv:0000.00000"]) == 1
        assert [p.key for p in library_of(session, ada)] == ["arxiv:2305.01234", "doi:10.1145/3579371.3589057"]
    remove(factory, "ada@example.com", purge=True, now=NOW)
    with factory() as session:
        assert library_of(session, ada) == []


def test_a_paper_known_by_title_only_matches_the_entry_with_that_title(factory: sessionmaker[Session]) -> None:
    ingest_bytes(factory, DUMP, name="d", now=NOW)
    ada = _ada(factory)
    papers = read_library(
        "@misc{a, title={Spiking neural networks for event cameras: a survey of m\u00fcller's ideas}}\n"
        "@misc{b, title={Spiking neural networks for event cameras}}\n".encode()
    ).papers
    with transaction(factory) as session:
        assert [p.entry_id is not None for p in add_papers(session, ada, papers, NOW)[0]] == [True, False]


def test_the_commands(tmp_path: Path) -> None:
    env = {**os.environ, "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"), "COLUMNS": "250"}

    def cli(*args: str) -> CliResult:
        return Cli(tmp_path, env, columns=250, placed=False)(*args, code=None)

    assert cli("subscribers", "add", "ada@example.com").returncode == 0
    (tmp_path / "lib.bib").write_text(BIBTEX)
    done = cli("subscribers", "library", "add", "ada@example.com", "lib.bib")
    assert done.returncode == 1
    assert done.stdout.strip() == "ada@example.com: added 3 papers (bibtex), 0 of them stored entries; 0 already there"
    assert done.stderr.splitlines() == [
        "warning: lib.bib: line 10: not a BibTeX entry that can be read",
        "warning: lib.bib: line 17: @book{no-title} has no title",
    ]
    listed = [
        json.loads(line)
        for line in cli("subscribers", "library", "list", "ada@example.com", "--json").stdout.splitlines()
    ]
    assert [p["key"] for p in listed] == ["arxiv:2305.01234", "doi:10.1145/3579371.3589057", "arxiv:1706.03762"]
    exported = cli("subscribers", "export", "--library", "ada@example.com")
    assert exported.returncode == 0 and len(json.loads(exported.stdout)) == 3
    (tmp_path / "back.json").write_text(exported.stdout)
    again = cli("subscribers", "library", "add", "ada@example.com", "back.json")
    assert (again.returncode, again.stdout.strip()) == (
        0,
        "ada@example.com: added 0 papers (csl-json), 0 of them stored entries; 3 already there",
    )
    removed = cli("subscribers", "library", "remove", "ada@example.com", "arxiv:1706.03762", "nope")
    assert removed.returncode == 1 and removed.stderr.strip() == "error: 1 of the keys given are not in the library"
    (tmp_path / "bad.bin").write_bytes(b"\xff\xfe\x00")
    bad = cli("subscribers", "library", "add", "ada@example.com", "bad.bin")
    assert (bad.returncode, bad.stderr.strip()) == (1, "error: bad.bin: not UTF-8 text (byte 0)")
    missing = cli("subscribers", "library", "add", "ada@example.com", "nowhere.bib")
    assert missing.returncode == 1 and "nowhere.bib: cannot read: No such file or directory" in missing.stderr
    assert "Traceback" not in bad.stderr + missing.stderr + removed.stderr
    # Two papers and, only now, entries to learn against: what the operator asks about
    # is ranked by a model trained there and then, not at the daemon's next planning pass.
    assert cli("dumps", "ingest", *map(str, sorted((ROOT / "seeds").glob("*.txt")))).returncode == 0
    tested = cli("tags", "test", "snn or liked", "--subscriber", "ada@example.com")
    assert tested.returncode == 0 and "has no model yet" not in tested.stderr, tested.stderr
    assert any(" taste " in line for line in tested.stdout.splitlines()[:4]), tested.stdout  # the model column


# --- hostile files (issue 34) -----------------------------------------------------------

MB = 1_000_000


def _normal_bibtex(size: int) -> bytes:
    entry = (
        "@article{{k{n},\n  title = {{A study of spiking networks, number {n}}},\n  author = {{Ada Lovelace and "
        "Grace Hopper}},\n  abstract = {{We study things in $O(n)$ time. " + "More words about it. " * 20 + "}},\n"
        "  eprint = {{2401.{n:05d}}}\n}}\n\n"
    )
    out, n = [], 0
    while sum(map(len, out)) < size:
        out.append(entry.format(n=n % 99_999))
        n += 1
    return "".join(out).encode()[:size]


def library_shapes(size: int) -> dict[str, bytes]:
    """Each shape that once made a reader quadratic or slow, *size* bytes of it."""
    return {
        "x and newlines (format detection)": b"x" + b"\n" * size,
        "newlines": b"\n" * size,
        "@ then newlines": b"@" + b"\n" * size,
        "@ signs": b"@" * size,
        "@a{ repeated": b"@a{" * (size // 3),
        "open braces": b"@a{k, title = " + b"{" * size,
        "close braces": b"@a{k, title = {x}" + b"}" * size,
        "commas": b"@article{k" + b"," * size + b"}",
        "equals": b"@article{k, title " + b"=" * size + b"}",
        "RIS records": b"TY  - JOUR\n" * (size // 11),
        "RIS and newlines": b"TY  - JOUR\n" + b"\n" * size,
        "RIS ends": b"TY  - JOUR\n" + b"ER  - \n" * (size // 7),
        "JSON brackets": b"[" * size,
        "JSON digits": b"[" + b"1" * size + b"]",
        "JSON strings": b"[" + b'"a",' * (size // 4) + b'"a"]',
        "ids": b"2401.00001\n" * (size // 11),
        "LaTeX abstract": b"@article{k, title = {x}, abstract = {" + b"$x^{2}$ " * (size // 8) + b"}}",
        "LaTeX title": b"@article{k, title = {" + b"$x^{2}$ " * (size // 8) + b"}}",
        "backslashes": b"@article{k, title = {" + b"\\" * size + b"}}",
    }


def _timed(data: bytes) -> float:
    import time

    started = time.perf_counter()
    try:
        read_library(data)
    except LibraryFileError:
        pass
    return time.perf_counter() - started


@pytest.mark.slow
def test_every_library_reader_runs_in_linear_time() -> None:
    """1 MB of each shape within ten times a normal 1 MB export: "x and newlines", RIS
    records and a LaTeX abstract are the shapes a quadratic reader takes minutes on."""
    baseline = min(_timed(_normal_bibtex(MB)) for _ in range(3))
    slow = {}
    for shape, data in library_shapes(MB).items():
        spent = min(_timed(data) for _ in range(2 if _timed(data) > 10 * baseline + 0.5 else 1))
        if spent > 10 * baseline + 0.5:
            slow[shape] = round(spent / baseline, 1)
    assert not slow, f"times a normal 1 MB export ({baseline:.3f} s): {slow}"


@pytest.mark.parametrize(
    "data",
    [
        b'{"items": 5}',
        b'{"items": null}',
        b'{"items": "abc"}',
        b'{"items": [5, null, "x", []]}',
        b"[" + b"1" * 4301 + b"]",
        b'{"title": 5, "DOI": ["x"]}',
        b"[" + b"[" * 100_000 + b"]" * 100_000 + b"]",
        b"5",
        b"null",
    ],
)
def test_csl_json_of_any_shape_is_read_or_named(data: bytes) -> None:
    read = read_library(data)
    assert read.papers == [] and read.problems  # each named, never a traceback


def test_a_library_holds_at_most_its_share(factory: sessionmaker[Session]) -> None:
    from bot.taste.library_service import import_library

    ada = _ada(factory)
    ids = "".join(f"2401.{n:05d}\n" for n in range(10)).encode()
    first = import_library(factory, ada, ids, NOW, most=4)
    assert (len(first.added), first.already, first.over) == (4, 0, 6)
    again = import_library(factory, ada, ids, NOW, most=4)
    assert (len(again.added), again.already, again.over) == (0, 4, 6)
    with factory() as session:
        assert len(library_of(session, ada)) == 4


def test_the_command_says_what_did_not_fit(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
        "DIGESTBOT_SUBSCRIBERS__LIBRARY_MAX_PAPERS": "2",
    }

    def cli(*args: str) -> CliResult:
        return Cli(tmp_path, env, columns=250, placed=False)(*args, code=None)

    assert cli("subscribers", "add", "ada@example.com").returncode == 0
    (tmp_path / "ids.txt").write_text("2401.00001\n2401.00002\n2401.00003\n")
    done = cli("subscribers", "library", "add", "ada@example.com", "ids.txt")
    assert done.returncode == 1 and "added 2 papers" in done.stdout
    assert done.stderr.strip() == (
        "warning: ids.txt: 1 paper not added: a library holds at most 2 (subscribers.library_max_papers)"
    )
