"""Subscriber service: validate what operators type or import, then store it.

Every value is checked here, at input: addresses with email-validator (IDN
domains accepted, no DNS look-ups), display names free of control characters,
filters parsed, IANA time zones resolved.  A stored subscriber is therefore
always valid.  Never renders or sends.
"""

from __future__ import annotations

import csv
import io
import re
import zoneinfo
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime

from email_validator import EmailNotValidError, validate_email
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.filters import FilterError, Tag, atoms, normalize_filter, parse_filter
from bot.choose.tagging import TagRules
from bot.choose.vocabulary import unknown_tags, unknown_tags_note
from bot.config import Settings
from bot.domain import Subscriber, SubscriberFields, SubscriberStatus, UpsertCounts
from bot.store.engine import transaction
from bot.store.entry_reads import tag_names
from bot.store.subscribers import (
    email_key,
    get_subscriber,
    list_subscribers,
    purge_subscriber,
    set_send_updates,
    set_status,
    subscribers_by_ids,
    upsert_subscribers,
)
from bot.text import CONTROL_CHARACTERS, header_text, hides_control_characters
from bot.tokens import token_is_valid, token_subscriber_id

CSV_COLUMNS = ("email", "name", "filter", "timezone", "send_hour", "status", "backfill")
_BACKFILL = re.compile(r"^(?:all|none|\d{1,4}d)$")


class SubscriberInputError(ValueError):
    """One bad field; ``str()`` names it: ``email: ...``."""


def clean_email(raw: str) -> str:
    if CONTROL_CHARACTERS.search(raw):
        raise SubscriberInputError("email: contains control characters")
    try:
        # allow_smtputf8=False: a non-ASCII local part needs SMTPUTF8 end to end,
        # which digests are not sent with; internationalized domains are fine (IDNA).
        return validate_email(raw.strip(), check_deliverability=False, allow_smtputf8=False).normalized
    except EmailNotValidError as exc:
        raise SubscriberInputError(f"email: {raw.strip()!r}: {exc}") from None


def clean_name(raw: str) -> str:
    if CONTROL_CHARACTERS.search(raw) or hides_control_characters(raw):
        raise SubscriberInputError("name: contains control characters (line breaks included, RFC 2047 encoded or not)")
    # A name goes into the To header: stored as what a mail reader would show,
    # never as encoded words.
    name = header_text(raw)
    if len(name) > 200:
        raise SubscriberInputError("name: longer than 200 characters")
    return name


def clean_filter(raw: str) -> str:
    try:
        return normalize_filter(raw)
    except FilterError as exc:
        raise SubscriberInputError(f"filter: {exc}") from None


def clean_timezone(raw: str) -> str:
    name = raw.strip()
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise SubscriberInputError(f"timezone: {name!r} is not an IANA time zone (e.g. Europe/Berlin)") from None
    return name


def clean_hour(raw: str | int) -> int:
    try:
        hour = int(raw)
    except (TypeError, ValueError):
        raise SubscriberInputError(f"send_hour: {raw!r} is not a whole hour 0-23") from None
    if not 0 <= hour <= 23:
        raise SubscriberInputError(f"send_hour: {hour} is not a whole hour 0-23")
    return hour


def clean_backfill(raw: str) -> str:
    value = raw.strip().lower()
    if not _BACKFILL.match(value):
        raise SubscriberInputError(f"backfill: {raw!r} is not 'all', 'none' or a number of days like '7d'")
    return "0d" if value == "none" else value


def clean_status(raw: str) -> SubscriberStatus:
    try:
        return SubscriberStatus(raw.strip().lower())
    except ValueError:
        allowed = ", ".join(s.value for s in SubscriberStatus)
        raise SubscriberInputError(f"status: {raw!r} is not one of {allowed}") from None


def clean_fields(
    email: str,
    *,
    name: str | None = None,
    filter: str | None = None,
    timezone: str | None = None,
    send_hour: str | int | None = None,
    status: str | None = None,
    backfill: str | None = None,
) -> SubscriberFields:
    """Validate every given field; None (or "" from a CSV cell) leaves it unset."""
    return SubscriberFields(
        email=clean_email(email),
        name=clean_name(name) if name is not None else None,
        filter=clean_filter(filter) if filter else None,
        timezone=clean_timezone(timezone) if timezone else None,
        send_hour=clean_hour(send_hour) if send_hour is not None and send_hour != "" else None,
        status=clean_status(status) if status else None,
        backfill=clean_backfill(backfill) if backfill else None,
    )


def defaults(settings: Settings) -> SubscriberFields:
    return SubscriberFields(
        email="",
        filter=normalize_filter(settings.subscribers.default_filter),
        timezone=settings.schedule.default_timezone,
        send_hour=settings.schedule.default_send_hour,
        backfill=settings.subscribers.default_backfill,
    )


def save(
    factory: sessionmaker[Session], settings: Settings, items: list[SubscriberFields], now: datetime
) -> UpsertCounts:
    with transaction(factory) as session:
        return upsert_subscribers(session, items, defaults=defaults(settings), now=now)


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


# Longer than any valid row (an address, a 200-character name, a 2,000-character filter).
MAX_CSV_LINE = 8192


def _csv_cells(line: str) -> list[str]:
    """One physical line's cells.  No field of ours may hold a line break, so each
    line is parsed alone: an unbalanced quote or a huge cell is that line's error,
    never a reason to swallow or drop the lines after it."""
    if len(line) > MAX_CSV_LINE:
        raise SubscriberInputError(f"line longer than {MAX_CSV_LINE:,} characters")
    try:
        rows = list(csv.reader([line], strict=True))
    except csv.Error as exc:
        text = str(exc)
        if "end of data" in text or "quotechar" in text:
            reason = "unbalanced quote"
        elif "new-line" in text:
            reason = "a line break (CR) inside a cell"
        else:
            reason = text
        raise SubscriberInputError(f"not a CSV row: {reason}") from None
    return rows[0] if rows else []


def read_csv(text: str) -> tuple[list[SubscriberFields], list[RowError]]:
    """Rows of a subscriber CSV (header required; only ``email`` is mandatory)."""
    rows, bad = _read_rows(text)
    return [fields for _, fields in rows], bad


def _read_rows(text: str) -> tuple[list[tuple[int, SubscriberFields]], list[RowError]]:
    """The good rows with their line numbers, and the bad rows."""
    # Lines end at LF (CRLF allowed), as editors number them; str.splitlines() would
    # also break at form feeds and the like, and a bare CR stays in its cell (an error).
    lines = [(number, line.removesuffix("\r")) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if not lines:
        return [], [RowError(1, f"header must name an 'email' column (columns: {', '.join(CSV_COLUMNS)})")]
    header_line, header_text = lines[0]
    try:
        header = _csv_header(header_text)
    except SubscriberInputError as exc:
        return [], [RowError(header_line, str(exc))]
    good: list[tuple[int, SubscriberFields]] = []
    bad: list[RowError] = []
    first_line: dict[str, int] = {}
    for line, raw in lines[1:]:
        try:
            fields = _csv_row(header, raw)
        except SubscriberInputError as exc:
            bad.append(RowError(line, str(exc)))
            continue
        if fields is None:
            continue
        # Two rows for one address: which one the operator meant is theirs to say.
        seen = first_line.setdefault(email_key(fields.email), line)
        if seen != line:
            bad.append(RowError(line, f"{fields.email} is already on line {seen} (one row per address)"))
            continue
        good.append((line, fields))
    return good, bad


def _csv_header(line: str) -> list[str]:
    try:
        header = [h.strip().lower() for h in _csv_cells(line)]
    except SubscriberInputError as exc:
        raise SubscriberInputError(f"header: {exc}") from None
    if "email" not in header:
        raise SubscriberInputError(f"header must name an 'email' column (columns: {', '.join(CSV_COLUMNS)})")
    unknown = [h for h in header if h not in CSV_COLUMNS]
    if unknown:
        raise SubscriberInputError(f"unknown column(s) {', '.join(unknown)} (columns: {', '.join(CSV_COLUMNS)})")
    return header


def _csv_row(header: list[str], line: str) -> SubscriberFields | None:
    """One data line's fields; None for a line of empty cells."""
    cells = _csv_cells(line)
    if len(cells) > len(header):
        raise SubscriberInputError("more cells than header columns")
    if not any(cell.strip() for cell in cells):
        return None
    return clean_fields(**{column: cells[i] if i < len(cells) else "" for i, column in enumerate(header)})


def import_csv(
    factory: sessionmaker[Session], settings: Settings, text: str, now: datetime, rules: TagRules | None = None
) -> ImportReport:
    """Idempotent upsert of every good row; bad rows are reported, not fatal.  With
    *rules*, rows whose filter names a tag nothing carries are reported as warnings."""
    rows, bad = _read_rows(text)
    good = [fields for _, fields in rows]
    counts = save(factory, settings, good, now) if good else UpsertCounts(0, 0, 0)
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
        yield [s.email, s.name, s.filter, s.timezone, str(s.send_hour), s.status.value, s.backfill]


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


class SubscriberNotFound(LookupError):
    def __init__(self, email: str) -> None:
        super().__init__(f"no subscriber {email!r}")


class AlreadySubscribed(ValueError):
    def __init__(self, email: str) -> None:
        super().__init__(f"{email} is already subscribed (use 'subscribers edit' to change it)")


def _require(session: Session, email: str) -> Subscriber:
    found = get_subscriber(session, email)
    if found is None:
        raise SubscriberNotFound(email)
    return found


def add(
    factory: sessionmaker[Session], settings: Settings, fields: SubscriberFields, now: datetime
) -> tuple[Subscriber, bool]:
    """Create a subscriber, or re-activate an unsubscribed one (keeping what was
    already sent to them, so nothing is sent twice).  Returns (subscriber, created)."""
    with transaction(factory) as session:
        existing = get_subscriber(session, fields.email)
        if existing is not None and existing.status is not SubscriberStatus.UNSUBSCRIBED:
            raise AlreadySubscribed(existing.email)
        if existing is not None:
            fields = replace(fields, status=SubscriberStatus.ACTIVE)
        upsert_subscribers(session, [fields], defaults=defaults(settings), now=now)
        return _require(session, fields.email), existing is None


def edit(factory: sessionmaker[Session], settings: Settings, fields: SubscriberFields, now: datetime) -> Subscriber:
    with transaction(factory) as session:
        _require(session, fields.email)
        upsert_subscribers(session, [fields], defaults=defaults(settings), now=now)
        return _require(session, fields.email)


def change_status(factory: sessionmaker[Session], email: str, status: SubscriberStatus, now: datetime) -> Subscriber:
    with transaction(factory) as session:
        found = _require(session, email)
        set_status(session, found.id, status, now)
        return _require(session, email)


def set_updates(factory: sessionmaker[Session], email: str, on: bool, now: datetime) -> Subscriber:
    """Whether their digests tell of entries revised since they were sent."""
    with transaction(factory) as session:
        found = _require(session, email)
        set_send_updates(session, found.id, on, now)
        return _require(session, email)


def remove(factory: sessionmaker[Session], email: str, *, purge: bool, now: datetime) -> Subscriber:
    """Soft removal marks ``unsubscribed`` and keeps the history; *purge* deletes
    the subscriber and everything recorded about them."""
    with transaction(factory) as session:
        found = _require(session, email)
        if purge:
            purge_subscriber(session, found.id)
        else:
            set_status(session, found.id, SubscriberStatus.UNSUBSCRIBED, now)
        return found


def find(factory: sessionmaker[Session], email: str) -> Subscriber:
    with factory() as session:
        return _require(session, email)


def by_tokens(factory: sessionmaker[Session], key: bytes, tokens: Iterable[str]) -> dict[str, Subscriber]:
    """The subscribers signed link tokens belong to, by token, read at once; unknown,
    forged and altered tokens are all simply absent (callers answer them the same way)."""
    named = {token: sid for token in tokens if (sid := token_subscriber_id(token)) is not None}
    if not named:
        return {}
    with factory() as session:
        found = subscribers_by_ids(session, named.values())
    return {
        token: subscriber
        for token, sid in named.items()
        if (subscriber := found.get(sid)) is not None
        and token_is_valid(key, token, subscriber.id, subscriber.unsubscribe_secret)
    }


def filter_warning(factory: sessionmaker[Session], rules: TagRules, filter_text: str) -> str:
    """A note on the tags *filter_text* names that no entry carries and no rule makes
    (``bot.choose.vocabulary``); "" when there are none.  The filter is valid."""
    expr = parse_filter(filter_text)
    if not any(isinstance(atom, Tag) for atom in atoms(expr)):
        return ""  # phrases name no tag: nothing to look up
    return unknown_tags_note(unknown_tags(expr, known_tags(factory, rules)))


def known_tags(factory: sessionmaker[Session], rules: TagRules) -> set[str]:
    """The tags entries carry or rules make, case-folded."""
    with factory() as session:
        return tag_names(session) | {rule.name for rule in rules.rules}


def set_filter(
    factory: sessionmaker[Session], settings: Settings, subscriber: Subscriber, raw: str, now: datetime
) -> Subscriber:
    """Validate *raw* (SubscriberInputError names the problem) and make it the filter."""
    fields = SubscriberFields(email=subscriber.email, filter=clean_filter(raw))
    return edit(factory, settings, fields, now)
