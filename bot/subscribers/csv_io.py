"""Subscriber service: subscribers as CSV, for ``subscribers import`` and ``export``.

Records are read by the csv module's rules and validated by
``bot.subscribers.subscriptions``: a bad record is reported with the line it starts on
and never stops the good ones.  Export is exact,
so it round-trips through import.  Never renders or sends.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.filters import parse_filter
from bot.choose.tagging import TagRules
from bot.choose.vocabulary import unknown_tags, unknown_tags_note
from bot.config import Settings
from bot.domain import Subscriber, SubscriberFields, SubscriberStatus, UpsertCounts
from bot.store.subscribers import email_key, list_subscribers
from bot.subscribers.fields import SubscriberInputError, clean_fields
from bot.subscribers.settings import SETTINGS, shown
from bot.subscribers.subscriptions import known_tags, save

# The yes/no settings (bot.subscribers.settings) follow, one column each, by name.
CSV_COLUMNS = (
    "email",
    "name",
    "filter",
    "timezone",
    "send_hour",
    "status",
    "backfill",
    "cadence",
    *(setting.name for setting in SETTINGS),
)


@dataclass(frozen=True, slots=True)
class RowError:
    line: int
    reason: str


@dataclass(frozen=True, slots=True)
class ImportReport:
    created: int
    updated: int
    unchanged: int
    errors: tuple[RowError, ...]
    warnings: tuple[RowError, ...] = ()  # imported, but worth a look (a filter naming an unknown tag)


# Longer than any valid record (an address, a 200-character name, a 2,000-character filter).
MAX_CSV_RECORD = 8192


def _records(text: str) -> Iterator[tuple[int, list[str] | SubscriberInputError]]:
    """Each line of *text* as a record by the csv module's rules, with its number; a line
    that is not a CSV record is its error, and reading goes on at the next line.

    No cell of ours may hold a line break.  A quote that a later line closes makes a
    record of several lines (RFC 4180): every one of those lines is a bad row, so that a
    line inside someone's quoted cell is never imported as a reader of its own.  A quote
    that nothing closes within a record's length ends with its line, and the lines after
    it are read on their own: never swallowed."""
    # Lines end at LF (CRLF allowed), as editors number them: a bare CR stays inside its
    # line, where an unquoted cell may not hold it.
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index]
        index += 1
        if len(line) > MAX_CSV_RECORD + 1:  # the cells and a CR: never parsed
            yield number, SubscriberInputError(f"record longer than {MAX_CSV_RECORD:,} characters")
            continue
        try:
            cells = next(csv.reader([line + "\n"], strict=True), [])
        except csv.Error as exc:
            end = _quoted_cell_end(lines, number - 1) if "end of data" in str(exc) else None
            if end is None:
                yield number, SubscriberInputError(f"not a CSV record: {_csv_problem(str(exc))}")
                continue
            yield (
                number,
                SubscriberInputError(
                    f"not a CSV record: a quoted cell runs from line {number} to line {end} (a cell may not hold a "
                    "line break); none of those lines is imported"
                ),
            )
            for inside in range(number + 1, end + 1):
                yield inside, SubscriberInputError(f"inside the quoted cell opened on line {number}: not imported")
            index = end
            continue
        if sum(map(len, cells)) > MAX_CSV_RECORD:
            yield number, SubscriberInputError(f"record longer than {MAX_CSV_RECORD:,} characters")
        else:
            yield number, cells


def _quoted_cell_end(lines: list[str], start: int) -> int | None:
    """The line (1-based) where the record that opens a quote on *lines[start]* ends, if a
    later line closes it within ``MAX_CSV_RECORD`` characters (so that reading on from
    each open quote costs a bounded length: linear in the file, whatever it holds)."""

    def bounded() -> Iterator[str]:
        read = 0
        for at in range(start, len(lines)):
            line = lines[at]
            read += len(line) + 1
            if read > MAX_CSV_RECORD:
                return
            yield line + "\n"

    reader = csv.reader(bounded(), strict=True)
    try:
        next(reader)
    except csv.Error as exc:
        return None if "end of data" in str(exc) else start + reader.line_num
    except StopIteration:
        return None
    return start + reader.line_num


def _csv_problem(said: str) -> str:
    if "end of data" in said:
        return "a quote opened on this line is never closed (a cell may not hold a line break)"
    if "new-line" in said:
        return "a line break (CR) inside an unquoted cell"
    if "expected after" in said:
        return "text after a closing quote"
    return " ".join(said.split())[:200]


def read_csv(text: str) -> tuple[list[SubscriberFields], list[RowError]]:
    """Rows of a subscriber CSV (header required; only ``email`` is mandatory)."""
    rows, bad = _read_rows(text)
    return [fields for _, fields in rows], bad


def _read_rows(text: str) -> tuple[list[tuple[int, SubscriberFields]], list[RowError]]:
    """The good records with the lines they start on, and the bad records."""
    records = ((line, cells) for line, cells in _records(text) if not _blank(cells))
    first = next(records, None)
    if first is None:
        return [], [RowError(1, f"header must name an 'email' column (columns: {', '.join(CSV_COLUMNS)})")]
    header_line, header_cells = first
    try:
        header = _csv_header(header_cells)
    except SubscriberInputError as exc:
        return [], [RowError(header_line, str(exc))]
    good: list[tuple[int, SubscriberFields]] = []
    bad: list[RowError] = []
    first_line: dict[str, int] = {}
    for line, cells in records:
        try:
            if isinstance(cells, SubscriberInputError):
                raise cells
            fields = _csv_row(header, cells)
        except SubscriberInputError as exc:
            bad.append(RowError(line, str(exc)))
            continue
        # Two rows for one address: which one the operator meant is theirs to say.
        seen = first_line.setdefault(email_key(fields.email), line)
        if seen != line:
            bad.append(RowError(line, f"{fields.email} is already on line {seen} (one row per address)"))
            continue
        good.append((line, fields))
    return good, bad


def _blank(cells: list[str] | SubscriberInputError) -> bool:
    """An empty line, or a record of empty cells."""
    return isinstance(cells, list) and not any(cell.strip() for cell in cells)


def _csv_header(cells: list[str] | SubscriberInputError) -> list[str]:
    if isinstance(cells, SubscriberInputError):
        raise SubscriberInputError(f"header: {cells}")
    header = [h.strip().lower() for h in cells]
    if "email" not in header:
        raise SubscriberInputError(f"header must name an 'email' column (columns: {', '.join(CSV_COLUMNS)})")
    unknown = [h for h in header if h not in CSV_COLUMNS]
    if unknown:
        raise SubscriberInputError(f"unknown column(s) {', '.join(unknown)} (columns: {', '.join(CSV_COLUMNS)})")
    return header


def _csv_row(header: list[str], cells: list[str]) -> SubscriberFields:
    """One record's fields."""
    if len(cells) > len(header):
        raise SubscriberInputError("more cells than header columns")
    return clean_fields(**{column: cells[i] if i < len(cells) else "" for i, column in enumerate(header)})


def import_csv(
    factory: sessionmaker[Session],
    settings: Settings,
    text: str,
    now: datetime,
    rules: TagRules | None = None,
    *,
    vouched_by: str = "",
) -> ImportReport:
    """Idempotent upsert of every good row; bad rows are reported, not fatal.  With
    *rules*, rows whose filter names a tag nothing carries are reported as warnings;
    *vouched_by* goes into the consent record of each new address."""
    rows, bad = _read_rows(text)
    good = [fields for _, fields in rows]
    counts = save(factory, settings, good, now, vouched_by=vouched_by) if good else UpsertCounts(0, 0, 0)
    warnings = _filter_warnings(factory, rules, rows) if rules is not None else ()
    return ImportReport(counts.created, counts.updated, counts.unchanged, tuple(bad), warnings)


def _filter_warnings(
    factory: sessionmaker[Session], rules: TagRules, rows: list[tuple[int, SubscriberFields]]
) -> tuple[RowError, ...]:
    known = known_tags(factory, rules)
    notes: dict[str, str] = {}
    found = []
    for line, fields in rows:
        if fields.filter is None:
            continue
        if fields.filter not in notes:
            notes[fields.filter] = unknown_tags_note(unknown_tags(parse_filter(fields.filter), known))
        if notes[fields.filter]:
            found.append(RowError(line, notes[fields.filter]))
    return tuple(found)


def export_rows(subscribers: Iterable[Subscriber]) -> Iterator[list[str]]:
    yield list(CSV_COLUMNS)
    for s in subscribers:
        core = [s.email, s.name, s.filter, s.timezone, str(s.send_hour), s.status.value, s.backfill, s.cadence]
        yield core + [shown(getattr(s, setting.name)) for setting in SETTINGS]


# What a spreadsheet reads as the start of a formula (OWASP's CSV injection list).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_cell(value: str) -> str:
    """*value* as text to a spreadsheet: a leading ' stops it from being a formula."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def export_csv(
    factory: sessionmaker[Session], status: SubscriberStatus | None = None, *, spreadsheet: bool = False
) -> str:
    """Every subscriber as the CSV ``import`` reads: exact, so it round-trips, unless
    *spreadsheet* neutralizes cells a spreadsheet would run as formulas."""
    with factory() as session:
        subscribers = list_subscribers(session, status=status)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in export_rows(subscribers):
        writer.writerow([spreadsheet_cell(cell) for cell in row] if spreadsheet else row)
    return out.getvalue()
