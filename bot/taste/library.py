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
from bot.domain.identity import arxiv_id_in, doi_in, normalize_title, title_key
from bot.domain.text import one_line, storable

MAX_BYTES = 20_000_000  # a library of 20,000 papers with abstracts is about 30 MB of BibTeX
MAX_PAPERS = 20_000
MAX_AT_SIGNS = 4 * MAX_PAPERS  # entries, and an e-mail address or two in some of them
MAX_PROBLEMS = 1000  # records named that cannot be read; the rest are counted
TITLE_CHARACTERS = 500
ABSTRACT_CHARACTERS = 5000
# Linear on any text: "^" with "[ \t]*", never "\s*", which would run over every newline
# after each line start and make a run of newlines quadratic.
_RIS_START = re.compile(r"^[ \t]*TY  - ", re.MULTILINE)
_BIBTEX_START = re.compile(r"^[ \t]*@[A-Za-z]+[ \t]*[{(]", re.MULTILINE)
_LATEX_HINT = re.compile(r"[\\{}$]")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+\*?|[$^_~]")  # \emph, \alpha, math signs: a space
_LATEX_SIGN = re.compile(r"\\[^A-Za-z\s]|[{}]")  # accents (\"u), escapes (\%), braces: the letters stay
# LaTeX is converted only this far into a value: what is kept of it, with room for markup.
_LATEX_READ = 4
# pylatexenc reads about 20 µs a character of mathematics: a file's titles get this many
# characters of it, and the rest (and every abstract, which only the model reads) has its
# markup taken off by one linear pass.
LATEX_BUDGET = 200_000


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
    elif stripped.startswith("@") or _BIBTEX_START.search(text):
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
    if len(found.problems) > MAX_PROBLEMS:
        more = len(found.problems) - MAX_PROBLEMS
        found.problems = [*found.problems[:MAX_PROBLEMS], f"and {more:,} more records that cannot be read"]
    return found


def paper_of(title: str, abstract: str, identifiers: Iterable[str], source: str) -> LibraryPaper | None:
    """A paper keyed as an entry would be (arXiv id, else DOI, else title); None when it
    has neither an identifier nor a title."""
    arxiv_id = doi = None
    for value in identifiers:
        arxiv_id = arxiv_id or arxiv_id_in(value)
        doi = doi or doi_in(value)
    title = storable(one_line(title))[:TITLE_CHARACTERS]
    norm = normalize_title(title)
    if arxiv_id:
        key = f"arxiv:{arxiv_id}"
    elif doi:
        key = f"doi:{doi}"
    elif norm:
        key = title_key(norm)
    else:
        return None
    return LibraryPaper(key, title, storable(one_line(abstract))[:ABSTRACT_CHARACTERS], arxiv_id, doi, None, source)


class _Latex:
    """LaTeX to text within one file's budget of pylatexenc (``LATEX_BUDGET``)."""

    def __init__(self) -> None:
        self.left = LATEX_BUDGET

    def title(self, value: str) -> str:
        value = value[: TITLE_CHARACTERS * _LATEX_READ]
        if not _LATEX_HINT.search(value):
            return value
        if len(value) > self.left:
            return plain(value)
        self.left -= len(value)
        from pylatexenc.latex2text import LatexNodes2Text

        try:
            return str(LatexNodes2Text(math_mode="verbatim").latex_to_text(value))
        except Exception:  # noqa: BLE001 - pylatexenc on any string; the markup comes off by hand instead
            return plain(value)


def plain(value: str) -> str:
    """*value* with LaTeX's commands, braces and math signs taken off: text for the model."""
    if not _LATEX_HINT.search(value):
        return value
    return " ".join(_LATEX_SIGN.sub("", _LATEX_COMMAND.sub(" ", value)).split())


def _bibtex(text: str) -> LibraryRead:
    from bibtexparser.entrypoint import parse_string

    logging.getLogger("bibtexparser").setLevel(logging.CRITICAL)  # its own warnings; ours say the line
    # bibtexparser starts a block at every "@": a file of them is work without papers.
    if text.count("@") > MAX_AT_SIGNS:
        raise LibraryFileError(
            f"more than {MAX_AT_SIGNS:,} @ signs: not a BibTeX export of at most {MAX_PAPERS:,} papers"
        )
    found = LibraryRead(format="bibtex")
    starts = _BIBTEX_START.finditer(text)
    cut = next((m.start() for n, m in enumerate(starts) if n == MAX_PAPERS), None)
    if cut is not None:  # only the first MAX_PAPERS entries are read
        text = text[:cut]
        found.problems.append(f"only the first {MAX_PAPERS:,} entries are read")
    parsed = parse_string(text)
    latex = _Latex()
    for block in parsed.failed_blocks:
        found.problems.append(f"line {(block.start_line or 0) + 1}: not a BibTeX entry that can be read")
    for entry in parsed.entries:
        fields = {name.lower(): str(f.value) for name, f in entry.fields_dict.items()}
        eprint = fields.get("eprint", "")
        if eprint and "arxiv" in fields.get("archiveprefix", "arxiv").lower():
            eprint = f"arXiv:{eprint}"
        ids = (eprint, fields.get("doi", ""), fields.get("url", ""), fields.get("journal", ""))
        abstract = plain(fields.get("abstract", "")[: ABSTRACT_CHARACTERS * _LATEX_READ])
        paper = paper_of(latex.title(fields.get("title", "")), abstract, ids, "bibtex")
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
    line, counted = 1, 0
    for number, (start, end) in enumerate(zip(starts, starts[1:], strict=False), start=1):
        line += text.count("\n", counted, start)  # from the last record on: linear in all
        counted = start
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
    except json.JSONDecodeError as exc:
        found.problems.append(f"line {exc.lineno}: not JSON ({exc.msg})")
        return found
    except RecursionError:
        found.problems.append("line 1: not JSON (nested too deep)")
        return found
    except ValueError:  # a number of thousands of digits, which Python refuses to convert
        found.problems.append("line 1: not CSL-JSON (a number too long to read)")
        return found
    items = _items(data)
    if not items:
        found.problems.append("line 1: no CSL-JSON items (a list of objects with a title, DOI or URL)")
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


def _items(data: object) -> list[object]:
    """The records of a CSL-JSON document: a list of them, an object holding them under
    "items" (Zotero's API), or one record alone; anything else holds none."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        items = data.get("items", [data])
        return items if isinstance(items, list) else [data] if "title" in data else []
    return []


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _identifiers(text: str) -> LibraryRead:
    found = LibraryRead(format="ids")
    seen: set[str] = set()
    for number, line in _lines(text):
        if line in seen:
            continue
        seen.add(line)
        if len(found.papers) > MAX_PAPERS:
            break
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
