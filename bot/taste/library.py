"""Taste stage, the library: the papers a reader vouches for, read from what reference
managers export (BibTeX, RIS, CSL-JSON, or a plain list of arXiv ids and DOIs, one per
line).  BibTeX is parsed by bibtexparser and its LaTeX turned into text by pylatexenc,
RIS by rispy, CSL-JSON by the json module.  A bad record is one line naming where it
is; the good ones are read all the same.  Pure: bytes in, papers out; never reads
the store.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from bot.domain import LibraryPaper, RatedEntry
from bot.ingest.identity import arxiv_id_in, doi_in, normalize_title, title_key
from bot.text import one_line

MAX_BYTES = 20_000_000  # a library of 20,000 papers with abstracts is about 30 MB of BibTeX
MAX_PAPERS = 20_000
TITLE_CHARACTERS = 500
ABSTRACT_CHARACTERS = 5000
_RIS_START = re.compile(r"^\s*TY  - ", re.MULTILINE)
_LATEX_HINT = re.compile(r"[\\{}$]")


class LibraryFileError(Exception):
    """The file as a whole cannot be read (too big, not text, no known format)."""


@dataclass
class LibraryRead:
    papers: list[LibraryPaper] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "line 12: ...", "record 3: ..."
    format: str = ""


def read_library(data: bytes) -> LibraryRead:
    """The papers in an export, in order, each key once; ``LibraryFileError`` when the
    file cannot be read at all."""
    if len(data) > MAX_BYTES:
        raise LibraryFileError(f"larger than {MAX_BYTES // 1_000_000} MB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LibraryFileError(f"not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise LibraryFileError("not text (it holds NUL bytes)")
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        found = _csl_json(text)
    elif stripped.startswith("@") or re.search(r"^\s*@[A-Za-z]+\s*[{(]", text, re.MULTILINE):
        found = _bibtex(text)
    elif _RIS_START.search(text):
        found = _ris(text)
    else:
        found = _identifiers(text)
    return _once(found)


def _once(found: LibraryRead) -> LibraryRead:
    seen: set[str] = set()
    papers = []
    for paper in found.papers:
        if paper.key not in seen:
            seen.add(paper.key)
            papers.append(paper)
    if len(papers) > MAX_PAPERS:
        found.problems.append(f"only the first {MAX_PAPERS} papers are read")
        papers = papers[:MAX_PAPERS]
    found.papers = papers
    return found


def paper_of(title: str, abstract: str, identifiers: Iterable[str], source: str) -> LibraryPaper | None:
    """A paper keyed as an entry would be (arXiv id, else DOI, else title); None when it
    has neither an identifier nor a title."""
    arxiv_id = doi = None
    for value in identifiers:
        arxiv_id = arxiv_id or arxiv_id_in(value)
        doi = doi or doi_in(value)
    title = one_line(title)[:TITLE_CHARACTERS]
    norm = normalize_title(title)
    if arxiv_id:
        key = f"arxiv:{arxiv_id}"
    elif doi:
        key = f"doi:{doi}"
    elif norm:
        key = title_key(norm)
    else:
        return None
    return LibraryPaper(key, title, one_line(abstract)[:ABSTRACT_CHARACTERS], arxiv_id, doi, None, source)


def _latex(value: str) -> str:
    if not _LATEX_HINT.search(value):
        return value
    from pylatexenc.latex2text import LatexNodes2Text

    try:
        return str(LatexNodes2Text(math_mode="verbatim").latex_to_text(value))
    except Exception:  # noqa: BLE001 - pylatexenc on any string; the braces come off by hand instead
        return value.replace("{", "").replace("}", "")


def _bibtex(text: str) -> LibraryRead:
    from bibtexparser.entrypoint import parse_string

    logging.getLogger("bibtexparser").setLevel(logging.CRITICAL)  # its own warnings; ours say the line
    parsed = parse_string(text)
    found = LibraryRead(format="bibtex")
    for block in parsed.failed_blocks:
        found.problems.append(f"line {(block.start_line or 0) + 1}: not a BibTeX entry that can be read")
    for entry in parsed.entries:
        fields = {name.lower(): str(f.value) for name, f in entry.fields_dict.items()}
        eprint = fields.get("eprint", "")
        if eprint and "arxiv" in fields.get("archiveprefix", "arxiv").lower():
            eprint = f"arXiv:{eprint}"
        ids = (eprint, fields.get("doi", ""), fields.get("url", ""), fields.get("journal", ""))
        paper = paper_of(_latex(fields.get("title", "")), _latex(fields.get("abstract", "")), ids, "bibtex")
        if paper is None:
            found.problems.append(
                f"line {(entry.start_line or 0) + 1}: @{entry.entry_type}{{{entry.key}}} has no title"
            )
        else:
            found.papers.append(paper)
    return found


def _ris(text: str) -> LibraryRead:
    import rispy

    found = LibraryRead(format="ris")
    starts = [m.start() for m in _RIS_START.finditer(text)] + [len(text)]
    for number, (start, end) in enumerate(zip(starts, starts[1:], strict=False), start=1):
        line = text.count("\n", 0, start) + 1
        try:
            records = rispy.loads(text[start:end])
        except Exception as exc:  # noqa: BLE001 - rispy raises several kinds on a broken record
            found.problems.append(f"line {line}: record {number} cannot be read ({one_line(str(exc))[:80]})")
            continue
        for record in records:
            title = record.get("title") or record.get("primary_title") or record.get("translated_title") or ""
            ids = [str(record.get("doi", "")), *(str(u) for u in record.get("urls", []) or [])]
            paper = paper_of(str(title), str(record.get("abstract", "")), ids, "ris")
            if paper is None:
                found.problems.append(f"line {line}: record {number} has no title, DOI or arXiv id")
            else:
                found.papers.append(paper)
    return found


def _csl_json(text: str) -> LibraryRead:
    found = LibraryRead(format="csl-json")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        line = exc.lineno if isinstance(exc, json.JSONDecodeError) else 1
        found.problems.append(
            f"line {line}: not JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else 'nested too deep'})"
        )
        return found
    items = data if isinstance(data, list) else data.get("items", [data]) if isinstance(data, dict) else []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            found.problems.append(f"item {number}: not a CSL-JSON object")
            continue
        if _text(item.get("note")) == f"{FEEDBACK_NOTE}less like this":
            continue  # our own export of a "less like this": not a paper the reader vouches for
        ids = [str(item.get(name, "")) for name in ("DOI", "URL", "number", "archive_location", "id", "note")]
        paper = paper_of(_text(item.get("title")), _text(item.get("abstract")), ids, "csl-json")
        if paper is None:
            found.problems.append(f"item {number}: has no title, DOI or arXiv id")
        else:
            found.papers.append(paper)
    return found


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _identifiers(text: str) -> LibraryRead:
    found = LibraryRead(format="ids")
    for number, line in _lines(text):
        paper = paper_of("", "", [line], "ids")
        if paper is None or paper.key.startswith("paper:"):
            found.problems.append(f"line {number}: {line[:80]!r} is not an arXiv id or a DOI")
        else:
            found.papers.append(paper)
    return found


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            yield number, line


FEEDBACK_NOTE = "digestbot feedback: "  # + "more like this" | "less like this"


def csl_json(papers: Iterable[LibraryPaper], feedback: Iterable[RatedEntry] = ()) -> str:
    """The papers, and the entries the reader rated, as CSL-JSON (what ``subscribers
    export --library`` gives back, and what ``library add`` reads again: a rated
    entry's note says how it was rated, and "less like this" is not a paper to add)."""
    items: list[dict[str, str]] = []
    for paper in papers:
        item: dict[str, str] = {"id": paper.key, "type": "article", "title": paper.title}
        if paper.abstract:
            item["abstract"] = paper.abstract
        if paper.doi:
            item["DOI"] = paper.doi
        if paper.arxiv_id:
            item["URL"] = f"https://arxiv.org/abs/{paper.arxiv_id}"
            item["number"] = f"arXiv:{paper.arxiv_id}"
        items.append(item)
    for rated in feedback:
        items.append(
            {
                "id": rated.key,
                "type": "article",
                "title": rated.title,
                "note": f"{FEEDBACK_NOTE}{rated.verdict} like this",
            }
        )
        found = arxiv_id_in(rated.key) if rated.key.startswith("arxiv:") else None
        if found:
            items[-1]["URL"] = f"https://arxiv.org/abs/{found}"
    return json.dumps(items, ensure_ascii=False, indent=1) + "\n"
