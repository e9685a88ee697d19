"""Subscriber service: validate what operators type or import, then store it.

Every value is checked here, at input: addresses with email-validator (IDN
domains accepted, no DNS look-ups), display names free of control characters,
filters parsed, IANA time zones resolved.  A stored subscriber is therefore
always valid.  Never renders or sends.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from email_validator import EmailNotValidError, validate_email
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.filters import FilterError, Tag, atoms, filter_fault, normalize_filter, parse_filter
from bot.choose.tagging import TagRules
from bot.choose.vocabulary import unknown_tags, unknown_tags_note
from bot.config import Settings
from bot.domain import ConsentEvent, Subscriber, SubscriberFields, SubscriberStatus, UpsertCounts
from bot.domain.text import NOT_TYPED, header_text, hides_control_characters, one_line
from bot.plan.cadence import DAILY, CadenceError, clean_cadence
from bot.store.consents import known_addresses, record_consent, record_operator_adds
from bot.store.engine import transaction
from bot.store.entry_reads import tag_names
from bot.store.returns import record_cleared
from bot.store.subscribers import (
    email_key,
    get_subscriber,
    purge_subscriber,
    set_status,
    subscribers_by_ids,
    upsert_subscribers,
)
from bot.store.subscribers import (
    set_setting as store_setting,
)
from bot.store.tldrs import set_language
from bot.subscribers.settings import SETTINGS, SettingError, parse
from bot.subscribers.statuses import OPERATOR_ACTIONS, consent_change
from bot.subscribers.zones import canonical
from bot.tokens import token_is_valid, token_subscriber_id

_BACKFILL = re.compile(r"^(?:all|none|\d{1,4}d)$")


class SubscriberInputError(ValueError):
    """One bad field; ``str()`` names it: ``email: ...``."""


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
    fields: dict[str, Any] = {
        "email": clean_email(email),
        "name": clean_name(name) if name is not None else None,
        "filter": clean_filter(filter) if filter else None,
        "timezone": clean_timezone(timezone) if timezone else None,
        "send_hour": clean_hour(send_hour) if send_hour is not None and send_hour != "" else None,
        "status": clean_status(status) if status else None,
        "backfill": clean_backfill(backfill) if backfill else None,
        "cadence": clean_cadence_field(cadence) if cadence else None,
    }
    fields.update(clean_settings(settings))
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


def defaults(settings: Settings) -> SubscriberFields:
    return SubscriberFields(
        email="",
        filter=normalize_filter(settings.subscribers.default_filter),
        timezone=settings.schedule.default_timezone,
        send_hour=settings.schedule.default_send_hour,
        backfill=settings.subscribers.default_backfill,
        cadence=DAILY,
        **cast(dict[str, Any], {setting.name: setting.default for setting in SETTINGS}),
    )


def save(
    factory: sessionmaker[Session],
    settings: Settings,
    items: list[SubscriberFields],
    now: datetime,
    *,
    vouched_by: str = "",
) -> UpsertCounts:
    """Upsert *items*; with *vouched_by* (the operator's command), the new addresses get
    an ``operator`` consent record saying so."""
    with transaction(factory) as session:
        known = known_addresses(session, [item.email for item in items]) if vouched_by else set()
        counts = upsert_subscribers(session, items, defaults=defaults(settings), now=now)
        if vouched_by:
            new = [item.email for item in items if email_key(item.email) not in known]
            record_operator_adds(session, new, now, vouched_by)
        return counts


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
    factory: sessionmaker[Session],
    settings: Settings,
    fields: SubscriberFields,
    now: datetime,
    *,
    vouched_by: str = "",
) -> tuple[Subscriber, bool]:
    """Create a subscriber, or re-activate an unsubscribed (or pending) one, keeping what
    was already sent to them, so nothing is sent twice.  Returns (subscriber, created).
    *vouched_by* (the operator's command) goes into their consent record."""
    with transaction(factory) as session:
        existing = get_subscriber(session, fields.email)
        if existing is not None and existing.status not in (SubscriberStatus.UNSUBSCRIBED, SubscriberStatus.PENDING):
            raise AlreadySubscribed(existing.email)
        if existing is not None:
            fields = replace(fields, status=SubscriberStatus.ACTIVE)
        upsert_subscribers(session, [fields], defaults=defaults(settings), now=now)
        if vouched_by:
            record_operator_adds(session, [fields.email], now, vouched_by)
        return _require(session, fields.email), existing is None


def edit(
    factory: sessionmaker[Session],
    settings: Settings,
    fields: SubscriberFields,
    now: datetime,
    *,
    language: str | None = None,
) -> Subscriber:
    """Change the given *fields*, and with *language* the reader's TL;DR language (one of
    ``llm.languages``; ``SubscriberInputError`` naming them otherwise)."""
    chosen = offered_language(settings, language) if language is not None else None
    with transaction(factory) as session:
        found = _require(session, fields.email)
        upsert_subscribers(session, [fields], defaults=defaults(settings), now=now)
        if chosen is not None:
            set_language(session, found.id, chosen, now)
        return _require(session, fields.email)


def offered_language(settings: Settings, tag: str) -> str:
    """*tag* as ``llm.languages`` spells it (BCP 47 tags match whatever their case)."""
    offered = settings.llm.languages
    for language in offered:
        if language.casefold() == tag.strip().casefold():
            return language
    raise SubscriberInputError(
        f"language: {one_line(tag)[:40]!r} is not offered; llm.languages offers {', '.join(offered)}"
    )


def change_status(
    factory: sessionmaker[Session],
    email: str,
    status: SubscriberStatus,
    now: datetime,
    *,
    page: str = "",
    client: str = "",
    detail: str = "",
    only_from: Collection[SubscriberStatus] = frozenset(SubscriberStatus),
) -> Subscriber:
    """Set *email*'s status, recording an unsubscribe or resubscribe in the consent record
    (*page*: where it was asked, *client*: from which address).  Resuming a bounced
    address clears its bounce: the hard bounces read from the inbox before now no
    longer count (``bot.returns``).  Raises ``StatusChangeRefused`` when their status
    (read in the same transaction) is not one of *only_from*."""
    with transaction(factory) as session:
        found = _require(session, email)
        if found.status not in only_from:
            raise StatusChangeRefused(f"{found.email} is {found.status.value}, so this change is not possible")
        set_status(session, found.id, status, now)
        if found.status is SubscriberStatus.BOUNCED and status is SubscriberStatus.ACTIVE:
            record_cleared(session, found.id, now)
        event = consent_change(found.status, status)
        if event is not None:
            record_consent(session, found.id, ConsentEvent(event, now, found.email, page, client, detail))
        return _require(session, email)


def held_because(subscriber: Subscriber) -> str | None:
    """Why the planner leaves *subscriber* out whatever their status: a stored setting
    digestbot never writes (``bot.domain.stored``, or a filter that does not parse)."""
    return subscriber.fault or filter_fault(subscriber.filter)


def sendable(named: Sequence[Subscriber]) -> tuple[list[Subscriber], list[str]]:
    """Of the readers an operator named for a digest now, each once (an address named
    twice in any case is one reader), those who can get one; and why each other cannot."""
    chosen: dict[int, Subscriber] = {}
    refused: list[str] = []
    seen: set[int] = set()
    for subscriber in named:
        if subscriber.id in seen:
            continue
        seen.add(subscriber.id)
        fault = held_because(subscriber)
        if fault is not None:
            refused.append(f"{subscriber.email} cannot be planned ({fault}): nothing sent")
        elif subscriber.status is not SubscriberStatus.ACTIVE:
            refused.append(f"{subscriber.email} is {subscriber.status.value}: nothing sent")
        else:
            chosen[subscriber.id] = subscriber
    return list(chosen.values()), refused


def operator_change(
    factory: sessionmaker[Session], email: str, command: str, now: datetime, *, detail: str = ""
) -> tuple[Subscriber, str]:
    """``subscribers pause`` or ``resume`` (*command*, ``statuses.OPERATOR_ACTIONS``) on
    *email*: the subscriber as changed, and what the command says of it."""
    action = OPERATOR_ACTIONS[command]
    page = f"digestbot subscribers {command}"
    changed = change_status(
        factory, clean_email(email), action.after, now, page=page, detail=detail, only_from=action.before
    )
    return changed, action.said


def set_setting(factory: sessionmaker[Session], email: str, name: str, value: bool, now: datetime) -> Subscriber:
    """Set one of the subscriber's yes/no settings (``bot.subscribers.settings``)."""
    with transaction(factory) as session:
        found = _require(session, email)
        store_setting(session, found.id, name, value, now)
        return _require(session, email)


def remove(
    factory: sessionmaker[Session], email: str, *, purge: bool, now: datetime, page: str = "", detail: str = ""
) -> Subscriber:
    """Soft removal marks ``unsubscribed`` and keeps the history (and records it in the
    consent record: *page*, *detail*); *purge* deletes the subscriber and everything
    recorded about them."""
    with transaction(factory) as session:
        found = _require(session, email)
        if purge:
            purge_subscriber(session, found.id)
        else:
            set_status(session, found.id, SubscriberStatus.UNSUBSCRIBED, now)
            if consent_change(found.status, SubscriberStatus.UNSUBSCRIBED):
                record_consent(session, found.id, ConsentEvent("unsubscribe", now, found.email, page, "", detail))
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
