"""Subscriber fields, validated as they come in (from the command line, a CSV row, a
form): addresses with email-validator (IDN domains accepted, no DNS look-ups), display
names free of control characters, filters parsed, IANA time zones resolved, hours,
backfills, cadences, statuses and the yes/no settings.  ``SubscriberInputError`` names
the field.  Pure functions (the zone list is read once); never the store.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from collections.abc import Callable, Mapping
from typing import Any

from email_validator import EmailNotValidError, validate_email

from bot.choose.filters import FilterError, normalize_filter
from bot.domain import SubscriberFields, SubscriberStatus
from bot.domain.text import NOT_TYPED, header_text, hides_control_characters
from bot.plan.cadence import CadenceError, clean_cadence
from bot.subscribers.settings import SETTINGS, SettingError, parse
from bot.subscribers.zones import canonical

_BACKFILL = re.compile(r"^(?:all|none|\d{1,4}d)$")


class SubscriberInputError(ValueError):
    """A bad field, or several: each "field: reason" in ``problems``, in the order the
    fields were read; ``str()`` names them all: ``email: ...; timezone: ...``."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(p.rstrip(".") for p in problems) if len(problems) > 1 else "".join(problems))
        self.problems = problems


class StatusChangeRefused(SubscriberInputError):
    """The subscriber's status does not allow the change asked for."""


def clean_email(raw: str) -> str:
    if NOT_TYPED.search(raw):
        raise SubscriberInputError("email: contains control characters or noncharacters")
    try:
        # allow_smtputf8=False: a non-ASCII local part needs SMTPUTF8 end to end,
        # which digests are not sent with; internationalized domains are fine (IDNA).
        return validate_email(raw.strip(), check_deliverability=False, allow_smtputf8=False).normalized
    except EmailNotValidError as exc:
        raise SubscriberInputError(f"email: {raw.strip()!r}: {exc}") from None


def clean_name(raw: str) -> str:
    if NOT_TYPED.search(raw) or hides_control_characters(raw):
        raise SubscriberInputError(
            "name: contains control characters or noncharacters (line breaks included, RFC 2047 encoded or not)"
        )
    # A name goes into the To header: stored as what a mail client would show,
    # never as encoded words.
    name = header_text(raw)
    if len(name) > 200:
        raise SubscriberInputError("name: longer than 200 characters")
    return name


def clean_filter(raw: str) -> str:
    try:
        return normalize_filter(raw)
    except FilterError as exc:
        raise SubscriberInputError(f"filter: {exc.text!r}: position {exc.position}: {exc.message}") from None


@functools.cache
def _time_zones() -> frozenset[str]:
    """IANA's zone names; not the files of the zone folder that are no zone of a place
    (``posixrules``, ``Factory``, ``localtime``), which ``ZoneInfo`` would open too."""
    return frozenset(zoneinfo.available_timezones()) - {"Factory", "localtime", "posixrules"}


def clean_timezone(raw: str) -> str:
    """An IANA zone, stored as the zone of a place it names (``zones.canonical``)."""
    name = raw.strip()
    if name not in _time_zones():
        raise SubscriberInputError(f"timezone: {name!r} is not an IANA time zone (e.g. Europe/Berlin)")
    return canonical(name)


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


def clean_cadence_field(raw: str) -> str:
    try:
        return clean_cadence(raw)
    except CadenceError as exc:
        raise SubscriberInputError(f"cadence: {exc}") from None


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
    cadence: str | None = None,
    **settings: str | bool | None,
) -> SubscriberFields:
    """Validate every given field; None (or "" from a CSV cell) leaves it unset.
    *settings* are the yes/no settings (``bot.subscribers.settings``), by name: a bool,
    or a CSV cell's yes/no."""
    problems: list[str] = []

    def checked(clean: Callable[[Any], Any], value: Any) -> Any:
        try:
            return clean(value)
        except SubscriberInputError as exc:
            problems.extend(exc.problems)
            return None

    fields: dict[str, Any] = {
        "email": checked(clean_email, email),
        "name": checked(clean_name, name) if name is not None else None,
        "filter": checked(clean_filter, filter) if filter else None,
        "timezone": checked(clean_timezone, timezone) if timezone else None,
        "send_hour": checked(clean_hour, send_hour) if send_hour is not None and send_hour != "" else None,
        "status": checked(clean_status, status) if status else None,
        "backfill": checked(clean_backfill, backfill) if backfill else None,
        "cadence": checked(clean_cadence_field, cadence) if cadence else None,
    }
    fields.update(checked(clean_settings, settings) or {})
    if problems:  # every bad field of the row or command at once, not only the first
        raise SubscriberInputError(*problems)
    return SubscriberFields(**fields)


def clean_settings(given: Mapping[str, str | bool | None]) -> dict[str, Any]:
    """The yes/no settings in *given*, by name; None or "" leaves one unset."""
    known = {setting.name: setting for setting in SETTINGS}
    cleaned: dict[str, Any] = {}
    for name, value in given.items():
        if name not in known:
            raise TypeError(f"clean_fields() got an unexpected keyword argument {name!r}")
        if isinstance(value, bool):
            cleaned[name] = value
        elif value:
            try:
                cleaned[name] = parse(known[name], value)
            except SettingError as exc:
                raise SubscriberInputError(str(exc)) from None
    return cleaned
