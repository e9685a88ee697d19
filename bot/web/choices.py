"""Subscriber endpoint: the digest-choices form that sign-up and manage pages share.

Tag checkboxes or an advanced filter, cadence, time zone and send hour, read
into ``SubscriberFields`` with the CLI's validation (``bot.subscribers.subscriptions``),
and the menus the form offers.  Pure functions: never touch the store.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from bot.choose.filter_terms import Everything, Or, Tag, make_or, make_tag, to_text
from bot.choose.filters import FilterError, parse_filter, sections_of
from bot.domain import SubscriberFields
from bot.plan.cadence import CHOICES, describe
from bot.subscribers.fields import (
    SubscriberInputError,
    clean_cadence_field,
    clean_email,
    clean_filter,
    clean_hour,
    clean_name,
    clean_timezone,
)
from bot.subscribers.zones import UTC, places

MENU_TAGS = 60  # the most used tags are offered as checkboxes
EVERYTHING = "*"  # the first checkbox: every entry
_KEYWORDS = {"and", "or", "not", "liked"}  # words of the filter language, never tags it can name
_TAG_WORD = re.compile(r'^[^\s()"*]+$')


@dataclass(frozen=True, slots=True)
class MenuTag:
    name: str
    count: int
    ticked: bool = False


def menu(tags: Iterable[tuple[str, int]], ticked: Iterable[str] = ()) -> list[MenuTag]:
    """The checkboxes: everything (``*``), the most used tags that a filter can name,
    then any ticked tag the store does not (or no longer) count."""
    chosen = {name.casefold() for name in ticked}
    shown: list[MenuTag] = [MenuTag(EVERYTHING, 0, EVERYTHING in chosen)]
    seen: set[str] = {EVERYTHING}
    for name, count in tags:
        if len(shown) > MENU_TAGS:
            break
        folded = name.casefold()
        if folded in seen or folded in _KEYWORDS or not _TAG_WORD.match(name) or folded.startswith("author:"):
            continue
        seen.add(folded)
        shown.append(MenuTag(name, count, folded in chosen))
    shown += [MenuTag(name, 0, True) for name in sorted(chosen - seen)]
    return shown


def ticked_tags(filter_text: str) -> list[str] | None:
    """The tags of a filter that is only "tag or tag or ..." (what ticking boxes makes);
    None for any other filter, and for one of named interests even of tags alone (it
    belongs in the advanced box, where the names stay)."""
    try:
        expr = parse_filter(filter_text)
        if sections_of(filter_text):
            return None
    except FilterError:
        return None
    if isinstance(expr, Everything):
        return [EVERYTHING]
    items = expr.items if isinstance(expr, Or) else (expr,)
    if not all(isinstance(item, Tag) for item in items):
        return None
    return [item.name for item in items if isinstance(item, Tag)]


def filter_of(ticked: Sequence[str], advanced: str) -> str:
    """The filter a form asks for: the advanced box when it is filled in, else the ticked tags."""
    if advanced.strip():
        return clean_filter(advanced)
    names = [name.strip() for name in ticked if name.strip()]
    if EVERYTHING in names:
        return EVERYTHING
    if not names:
        raise SubscriberInputError("filter: tick at least one tag, or write a filter (* for everything)")
    bad = next((n for n in names if not _TAG_WORD.match(n) or n.casefold() in _KEYWORDS), None)
    if bad is not None:
        raise SubscriberInputError(f"filter: {bad!r} is not a tag")
    return clean_filter(to_text(make_or(*(make_tag(n) for n in names))))


def read_choices(form: Mapping[str, list[str]], *, email: str) -> SubscriberFields:
    """The digest choices of a submitted form, validated as the CLI validates them;
    ``SubscriberInputError`` names the first bad field."""

    def one(name: str) -> str:
        return (form.get(name) or [""])[0]

    return SubscriberFields(
        email=email,
        filter=filter_of(form.get("tag", []), one("filter")),
        cadence=clean_cadence_field(one("cadence") or "daily"),
        timezone=clean_timezone(one("timezone")),
        send_hour=clean_hour(one("send_hour")),
    )


def read_signup(form: Mapping[str, list[str]]) -> SubscriberFields:
    """A sign-up form: the address and name, then the digest choices."""
    raw = (form.get("email") or [""])[0]
    if not raw.strip():
        raise SubscriberInputError("email: give your email address")
    fields = read_choices(form, email=clean_email(raw))
    name = clean_name((form.get("name") or [""])[0])
    return SubscriberFields(
        email=fields.email,
        name=name,
        filter=fields.filter,
        cadence=fields.cadence,
        timezone=fields.timezone,
        send_hour=fields.send_hour,
    )


@cache
def zones() -> tuple[str, ...]:
    """The zones a person picks from (``bot.subscribers.zones``): UTC, then by region."""
    return (UTC, *(zone for names in places().values() for zone in names))


def zone_groups() -> list[tuple[str, tuple[str, ...]]]:
    """The menu's groups: (region, its zones)."""
    return list(places().items())


def cadences() -> list[tuple[str, str]]:
    """(value, label) of each cadence."""
    return [(value, describe(value)) for value in CHOICES]


@dataclass(frozen=True, slots=True)
class ChoicesForm:
    """The digest-choices form as a page shows it: the tag menu, the filter, and the
    cadence, zone and hour chosen."""

    tags: list[MenuTag]
    filter_text: str
    cadence: str
    timezone: str
    send_hour: int
    zone_chosen: bool = False  # chosen by the person: the browser's own zone is not put first

    @property
    def cadences(self) -> list[tuple[str, str]]:
        return cadences()

    @property
    def zone_groups(self) -> list[tuple[str, tuple[str, ...]]]:
        return zone_groups()

    @property
    def zone_extra(self) -> list[str]:
        """The zone chosen when the menu no longer offers it, offered as it is."""
        return [] if self.timezone in zones() else [self.timezone]


def hour_or(raw: str, default: int) -> int:
    """The send hour a form sent, or *default* when it is not one (0 to 23)."""
    return int(raw) if raw.isascii() and raw.isdigit() and 0 <= int(raw) <= 23 else default
