"""Sources stage, text dumps: the seeds, every odd-but-valid shape, every bad one."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.domain import EntryKind
from bot.ingest.formats import DumpFormatError, SourceFormatError, parse_any, parse_dump
from tests.conftest import SEEDS
from tests.helpers import render_dump
from tests.seed_facts import DUMP_TITLES, HEADER_TAGS, LMCACHE, MINIMAX

SEED_FILES = sorted(SEEDS.glob("*.txt"))

PAPER = """Sparse Things: A Study

Ada Lovelace, Alan Turing 2026-06-14

We study sparse things. See https://example.org/code.

PDF"""

REPO = """LMCache/LMCache

LMCache 2026-06-14 8,985 Python
LMCache/LMCache Python
LMCache: Supercharge Your LLM with the Fastest KV Cache Layer
8,985 1,311

Problem: caching. Method: a layer.

Code"""


def test_seed_dumps_parse_to_the_listed_titles() -> None:
    assert len(SEED_FILES) == 4
    for path, titles, header in zip(SEED_FILES, DUMP_TITLES, HEADER_TAGS, strict=True):
        parsed = parse_dump(path.read_bytes(), path.name)
        assert [e.content.title for e in parsed.entries] == titles
        assert parsed.header_tags == header


def test_seed_paper_fields_are_kept_verbatim() -> None:
    parsed = parse_dump(SEED_FILES[2].read_bytes(), "002")
    minimax = next(e for e in parsed.entries if e.content.title == MINIMAX)
    assert minimax.content.kind is EntryKind.PAPER
    assert minimax.content.authors == ("Xunhao Lai", "Weiqi Xu", "Yufeng Yang", "Qiaorui Chen")
    assert minimax.content.published == date(2026, 6, 14)
    assert minimax.content.summary.startswith("Ultra-long-context capability")
    assert minimax.content.links == ("https://github.com/MiniMax-AI/MSA", "https://huggingface.co/MiniMaxAI/MiniMax-M3")
    rescom = next(e for e in parsed.entries if e.content.title.startswith("ReSCom"))
    assert r"$0.05~\mathrm{mJ}$" in rescom.content.summary  # LaTeX is converted at render time, not here


def test_seed_repository_fields() -> None:
    parsed = parse_dump(SEED_FILES[2].read_bytes(), "002")
    repo = next(e for e in parsed.entries if e.content.title == LMCACHE)
    assert repo.content.kind is EntryKind.REPO
    assert repo.repo == "LMCache/LMCache"
    assert repo.content.links == ("https://github.com/LMCache/LMCache",)
    assert dict(repo.content.extra) == {
        "owner": "LMCache",
        "stars": "8985",
        "forks": "1311",
        "language": "Python",
        "description": "LMCache: Supercharge Your LLM with the Fastest KV Cache Layer",
    }


def test_header_drops_clear_all_and_duplicates() -> None:
    text = "Filtered by: GPU × LLM × gpu-kernels × LLM × Clear all\n\n" + PAPER
    assert parse_dump(text.encode(), "h").header_tags == ("GPU", "LLM", "gpu-kernels")


@pytest.mark.parametrize(
    ("name", "transform"),
    [
        ("crlf", lambda t: t.replace("\n", "\r\n")),
        ("bare cr", lambda t: t.replace("\n", "\r")),
        ("bom", lambda t: "\ufeff" + t),
        ("trailing spaces", lambda t: t.replace("\n", "  \t\n")),
        ("blank lines of spaces", lambda t: t.replace("\n\n", "\n   \n\n")),
        ("final newline", lambda t: t + "\n\n"),
    ],
)
def test_harmless_variations_parse_identically(name: str, transform) -> None:
    text = PAPER + "\n\n" + REPO
    expected = parse_dump(text.encode(), "x").entries
    got = parse_dump(transform(text).encode("utf-8"), "x").entries
    assert [(e.content.title, e.content.authors, e.content.summary, e.content.extra, e.content.links) for e in got] == [
        (e.content.title, e.content.authors, e.content.summary, e.content.extra, e.content.links) for e in expected
    ]


def test_multiline_latex_summary_stays_one_summary() -> None:
    text = """Attention Bounds

A. Author 2026-06-14

We prove
\\begin{equation}
  \\mathcal{O}(n \\log n) \\leq 2.5\\!\\times T
\\end{equation}
for all $n$.

PDF"""
    (entry,) = parse_dump(text.encode(), "latex").entries
    assert entry.content.summary == (
        "We prove\n\\begin{equation}\n  \\mathcal{O}(n \\log n) \\leq 2.5\\!\\times T\n\\end{equation}\nfor all $n$."
    )


def test_summary_of_several_paragraphs_is_joined() -> None:
    text = PAPER.replace("We study sparse things.", "Para one.\n\nPara two.")
    (entry,) = parse_dump(text.encode(), "p").entries
    assert entry.content.summary.startswith("Para one.\n\nPara two.")


BAD = [
    ("empty", b"", "e:", "empty file: expected at least one entry"),
    ("only blank", b"\n \n\t\n", "e:", "empty file: expected at least one entry"),
    ("binary", b"PDF\x00\x01\x02\xff", "e:1:", "binary data (NUL byte at offset 3); expected UTF-8 text"),
    ("latin-1", "Café\n\nA 2026-06-14\n\nx\n\nPDF".encode("latin-1"), "e:1:", "not UTF-8: byte 0xE9 at offset 3"),
    (
        "truncated: no final label",
        PAPER.rsplit("\n\n", 1)[0].encode(),
        "e:5:",
        "entry on line 1 is truncated: expected link label PDF or Code after its summary",
    ),
    (
        "truncated after title",
        b"Lonely Title\n",
        "e:1:",
        "entry on line 1 is truncated: expected '<authors> YYYY-MM-DD' after the title",
    ),
    (
        "no date",
        b"T\n\nSomebody\n\nsummary\n\nPDF",
        "e:3:",
        "expected '<authors, comma separated> YYYY-MM-DD' after title on line 1",
    ),
    ("bad date", b"T\n\nSomebody 2026-13-45\n\nsummary\n\nPDF", "e:3:", "invalid date '2026-13-45'"),
    ("label first", b"PDF\n\nT\n\nA 2026-01-01\n\nS\n\nPDF", "e:1:", "expected an entry title, found link label 'PDF'"),
    (
        "label lost mid-file",
        (PAPER.rsplit("\n\n", 1)[0] + "\n\n" + PAPER).encode(),
        "e:7:",
        "expected link label PDF or Code to end entry on line 1, found another entry",
    ),
    ("header only", "Filtered by: GPU × Clear all\n".encode(), "e:1:", "only a 'Filtered by:' header"),
]


@pytest.mark.parametrize(("case", "data", "where", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_dumps_fail_with_a_located_one_line_message(case: str, data: bytes, where: str, message: str) -> None:
    with pytest.raises(DumpFormatError) as info:
        parse_dump(data, "e")
    text = str(info.value)
    assert text.startswith(where + " ")
    assert message in text
    assert "\n" not in text


def test_a_file_that_is_no_dump_is_never_quoted_and_a_dump_is() -> None:
    """Until an entry was read, the file may be anything named by mistake (/etc/shadow, a
    file holding one token): no message, and so no failure record, repeats its lines.
    Once it is a dump, a message names the entry by its title."""
    secret = b"root:$6$s3cr3t$hash:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n"
    for data in (secret, b"sk-live-0123456789abcdef\n", b"token\n\nnot a date line\n"):
        with pytest.raises(DumpFormatError) as info:
            parse_dump(data, "e")
        assert not any(word in str(info.value) for word in ("s3cr3t", "sk-live", "token", "not a date")), info.value
    with pytest.raises(DumpFormatError) as info:
        parse_dump(PAPER.encode() + b"\n\nSecond Paper\n\nno date here", "e")
    assert "entry 'Second Paper' is truncated" in str(info.value) or "after title 'Second Paper'" in str(info.value)


# --- property tests ---------------------------------------------------------

_word = st.text(alphabet=st.characters(categories=("L", "N")), min_size=1, max_size=10)
_title = st.lists(_word, min_size=1, max_size=8).map(" ".join).filter(lambda t: t not in ("PDF", "Code"))
_authors = st.lists(st.lists(_word, min_size=1, max_size=3).map(" ".join), min_size=1, max_size=4)
_sentence = st.lists(_word, min_size=1, max_size=30).map(lambda ws: " ".join(ws) + ".")
_summary = st.lists(_sentence, min_size=1, max_size=4).map(" ".join)
_paper = st.tuples(_title, _authors, st.dates(date(1990, 1, 1), date(2100, 1, 1)), _summary)


@given(st.lists(_paper, min_size=1, max_size=8))
def test_generated_dumps_round_trip(papers: list[tuple[str, list[str], date, str]]) -> None:
    parsed = parse_dump(render_dump(papers).encode(), "gen")
    assert [
        (e.content.title, list(e.content.authors), e.content.published, e.content.summary) for e in parsed.entries
    ] == [(t, a, d, s) for t, a, d, s in papers]


@given(st.binary(max_size=2000))
def test_arbitrary_bytes_raise_only_format_errors(data: bytes) -> None:
    try:
        parse_any(data, "fuzz")
    except SourceFormatError:
        pass


@given(st.data())
def test_mutated_seed_dumps_raise_only_dump_format_errors(data: st.DataObject) -> None:
    raw = bytearray(data.draw(st.sampled_from(SEED_FILES)).read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["delete", "insert", "replace", "truncate"]))
        at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "delete":
            del raw[at : at + data.draw(st.integers(1, 200))]
        elif op == "insert":
            raw[at:at] = data.draw(st.sampled_from([b"\n\n", b"PDF", b"\n\nCode\n\n", b"\xff", b"\x00", b"2026-01-01"]))
        elif op == "replace" and raw:
            raw[at] = data.draw(st.integers(0, 255))
        else:
            del raw[at:]
    try:
        parse_dump(bytes(raw), "mutant")
    except DumpFormatError as exc:
        assert "\n" not in str(exc)
