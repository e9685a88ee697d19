"""Subscriber service: what operators type or import, validated (``bot.subscribers.fields``),
then stored; status changes, look-ups by address and token, filter warnings.  A stored
subscriber is therefore always valid.  Never renders or sends.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.filter_terms import Tag, atoms
from bot.choose.filters import filter_fault, normalize_filter, parse_filter
from bot.choose.tagging import TagRules
from bot.choose.vocabulary import unknown_tags, unknown_tags_note
from bot.config import Settings
from bot.domain import ConsentEvent, Subscriber, SubscriberFields, SubscriberStatus, UpsertCounts
from bot.domain.statuses import OPERATOR_ACTIONS, after_added_again, after_unsubscribe, consent_change
from bot.domain.text import one_line
from bot.plan.cadence import DAILY
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
from bot.subscribers.fields import (
    StatusChangeRefused,
    SubscriberInputError,
    clean_email,
    clean_filter,
)
from bot.subscribers.settings import SETTINGS
from bot.tokens import token_is_valid, token_subscriber_id


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
        if existing is not None:
            again = after_added_again(existing.status)
            if again is None:
                raise AlreadySubscribed(existing.email)
            fields = replace(fields, status=again)
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
        elif (after := after_unsubscribe(found.status)) is not None:
            set_status(session, found.id, after, now)
            if consent_change(found.status, after):
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
