"""Subscriber rows: lookups, batched upserts, status changes, purge."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import cast

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.orm import Session

from bot.domain import SUBSCRIBER_SETTINGS, Subscriber, SubscriberFields, SubscriberStatus, UpsertCounts
from bot.domain.statuses import ADDED
from bot.domain.stored import read_settings, stored_status
from bot.store.bulk import among, bulk_insert, chunks
from bot.store.channel_tables import ChannelRow
from bot.store.retention import drop_unshown_bodies
from bot.store.row_shapes import RowShape
from bot.store.schema import Digest, SubscriberRow


def email_key(email: str) -> str:
    """The form addresses are compared in: case-folded, the domain in Unicode (stored
    addresses have it so), so that a bounce naming ``linus@xn--bcher-kva.example``
    finds ``linus@bücher.example``."""
    local, at, domain = email.rpartition("@")
    if "xn--" in domain.casefold():
        domain = _unicode_domain(domain)
    return (local + at + domain).casefold()


def _unicode_domain(domain: str) -> str:
    import idna

    try:
        return str(idna.decode(domain, uts46=True))
    except (idna.IDNAError, UnicodeError, ValueError):
        return domain


# Read as untrusted values (``bot.domain.stored``), so computed; the rest as stored.
SUBSCRIBER = RowShape(
    Subscriber, computed=("timezone", "send_hour", "status", "backfill", "cadence", "taste_threshold", "fault")
)


def _view(row: SubscriberRow) -> Subscriber:
    read = read_settings(
        status=row.status,
        timezone=row.timezone,
        send_hour=row.send_hour,
        cadence=row.cadence,
        backfill=row.backfill,
        taste_threshold=row.taste_threshold,
    )
    return SUBSCRIBER.of(
        row,
        timezone=read.timezone,
        send_hour=read.send_hour,
        status=read.status,
        backfill=read.backfill,
        cadence=read.cadence,
        taste_threshold=read.taste_threshold,
        fault=read.fault,
    )


def get_subscriber(session: Session, email: str) -> Subscriber | None:
    row = session.scalars(select(SubscriberRow).where(SubscriberRow.email_key == email_key(email))).first()
    return _view(row) if row else None


def subscribers_by_ids(session: Session, subscriber_ids: Iterable[int]) -> dict[int, Subscriber]:
    """Those of *subscriber_ids* that exist, by id."""
    found: dict[int, Subscriber] = {}
    for part in chunks(sorted(set(subscriber_ids))):
        rows = session.scalars(select(SubscriberRow).where(SubscriberRow.id.in_(part)))
        found.update((row.id, _view(row)) for row in rows)
    return found


def subscriber_statuses(session: Session, subscriber_ids: Iterable[int]) -> dict[int, SubscriberStatus]:
    """Status by id of those that still exist."""
    found: dict[int, SubscriberStatus] = {}
    for part in chunks(sorted(set(subscriber_ids))):
        query = select(SubscriberRow.id, SubscriberRow.status).where(SubscriberRow.id.in_(part))
        found.update((i, stored_status(status)) for i, status in session.execute(query))
    return found


def subscribers_after(
    session: Session, after_id: int, limit: int, *, status: SubscriberStatus, through_id: int | None = None
) -> list[Subscriber]:
    """Up to *limit* subscribers with that status and an id above *after_id* (and at
    most *through_id*), by id (the planner walks them in batches instead of holding them all)."""
    query = select(SubscriberRow).where(SubscriberRow.id > after_id, SubscriberRow.status == status.value)
    if through_id is not None:
        query = query.where(SubscriberRow.id <= through_id)
    return [_view(row) for row in session.scalars(query.order_by(SubscriberRow.id).limit(limit))]


def watermarks(session: Session, subscriber_ids: Iterable[int]) -> dict[int, tuple[datetime, str]]:
    """The planner's (planned_through, planned_key) of those that have one."""
    found: dict[int, tuple[datetime, str]] = {}
    for part in chunks(sorted(set(subscriber_ids))):
        query = select(SubscriberRow.id, SubscriberRow.planned_through, SubscriberRow.planned_key).where(
            among(session, SubscriberRow.id, part), SubscriberRow.planned_through.is_not(None)
        )
        # planned_through is not NULL by the query, and planned_key is written with it.
        found.update((i, cast(tuple[datetime, str], (through, key))) for i, through, key in session.execute(query))
    return found


def earliest_watermarks(session: Session) -> dict[str, datetime]:
    """Per filter of an active subscriber, the earliest watermark its readers have."""
    query = (
        select(SubscriberRow.filter, func.min(SubscriberRow.planned_through))
        .where(SubscriberRow.status == SubscriberStatus.ACTIVE.value, SubscriberRow.planned_through.is_not(None))
        .group_by(SubscriberRow.filter)
    )
    return {text: earliest for text, earliest in session.execute(query) if earliest is not None}


def set_watermarks(session: Session, marks: Sequence[tuple[int, datetime, str]]) -> None:
    if marks:
        session.connection().execute(
            update(SubscriberRow.__table__)
            .where(SubscriberRow.__table__.c.id == bindparam("sid"))
            .values(planned_through=bindparam("through"), planned_key=bindparam("key")),
            [{"sid": i, "through": through, "key": key} for i, through, key in marks],
        )


def list_subscribers(session: Session, *, status: SubscriberStatus | None = None) -> list[Subscriber]:
    """The readers (a channel's row is not one: ``channels list`` shows those), by address."""
    channels = select(ChannelRow.subscriber_id).scalar_subquery()
    query = select(SubscriberRow).where(SubscriberRow.id.not_in(channels)).order_by(SubscriberRow.email_key)
    if status is not None:
        query = query.where(SubscriberRow.status == status.value)
    return [_view(r) for r in session.scalars(query)]


_GIVEN = ("name", "filter", "timezone", "send_hour", "backfill", "cadence", *SUBSCRIBER_SETTINGS)


def count_by_status(session: Session) -> dict[SubscriberStatus, int]:
    """How many subscribers have each status now (a status none has is left out)."""
    counts: dict[SubscriberStatus, int] = {}
    for status, count in session.execute(select(SubscriberRow.status, func.count()).group_by(SubscriberRow.status)):
        read = stored_status(status)  # one digestbot never writes is held, as paused
        counts[read] = counts.get(read, 0) + count
    return counts


def upsert_subscribers(
    session: Session, items: Sequence[SubscriberFields], *, defaults: SubscriberFields, now: datetime
) -> UpsertCounts:
    """Insert new addresses (missing fields from *defaults*) and update the given
    fields of known ones, in batches; a row that would change nothing is left alone."""
    by_key: dict[str, SubscriberFields] = {}
    for item in items:  # the last row for an address wins (callers report repeats before this)
        by_key[email_key(item.email)] = item
    existing = _current_by_key(session, list(by_key))
    new_rows = [_new_row(key, item, defaults, now) for key, item in by_key.items() if key not in existing]
    bulk_insert(session, SubscriberRow.__table__, new_rows)
    # Updates grouped by which fields they set, one executemany per group.
    groups: dict[tuple[str, ...], list[dict[str, object]]] = {}
    unchanged = 0
    for key, item in by_key.items():
        if key in existing:
            row_id, current = existing[key]
            values = _given_values(item)
            if all(current.get(name) == value for name, value in values.items()):
                unchanged += 1
                continue
            values.update(updated_at=now, row_id=row_id)
            groups.setdefault(tuple(sorted(values)), []).append(values)
    table = SubscriberRow.__table__
    for names, rows in groups.items():
        statement = (
            update(table)
            .where(table.c.id == bindparam("row_id"))
            .values({n: bindparam(n) for n in names if n != "row_id"})
        )
        session.connection().execute(statement, rows)
    return UpsertCounts(len(new_rows), sum(len(rows) for rows in groups.values()), unchanged)


def _current_by_key(session: Session, keys: list[str]) -> dict[str, tuple[int, dict[str, object]]]:
    """Each known address's row id and the values an import may set."""
    columns = [getattr(SubscriberRow, name) for name in ("email", *_GIVEN, "status")]
    existing: dict[str, tuple[int, dict[str, object]]] = {}
    for part in chunks(keys):
        query = select(SubscriberRow.email_key, SubscriberRow.id, *columns).where(SubscriberRow.email_key.in_(part))
        for key, row_id, *values in session.execute(query):
            existing[key] = (row_id, dict(zip(("email", *_GIVEN, "status"), values, strict=True)))
    return existing


def _new_row(key: str, item: SubscriberFields, defaults: SubscriberFields, now: datetime) -> dict[str, object]:
    return {
        "email": item.email,
        "email_key": key,
        "name": item.name if item.name is not None else "",
        "filter": item.filter if item.filter is not None else defaults.filter,
        "timezone": item.timezone or defaults.timezone,
        "send_hour": item.send_hour if item.send_hour is not None else defaults.send_hour,
        "status": (item.status or ADDED).value,
        "backfill": item.backfill or defaults.backfill,
        "cadence": item.cadence or defaults.cadence or "daily",
        **{name: _given_or(getattr(item, name), getattr(defaults, name)) for name in SUBSCRIBER_SETTINGS},
        "unsubscribe_secret": secrets.token_hex(16),
        "bounces": 0,
        "created_at": now,
        "updated_at": now,
    }


def _given_or(given: object, default: object) -> object:
    return given if given is not None else default


def _given_values(item: SubscriberFields) -> dict[str, object]:
    """The columns a known subscriber's row gets: only the fields *item* gives."""
    values: dict[str, object] = {name: getattr(item, name) for name in _GIVEN if getattr(item, name) is not None}
    if item.status is not None:
        values["status"] = item.status.value
    values["email"] = item.email
    return values


def set_status(session: Session, subscriber_id: int, status: SubscriberStatus, now: datetime) -> None:
    session.execute(
        update(SubscriberRow).where(SubscriberRow.id == subscriber_id).values(status=status.value, updated_at=now)
    )


def set_setting(session: Session, subscriber_id: int, name: str, value: bool, now: datetime) -> None:
    """Set one of the subscriber's yes/no settings (``SUBSCRIBER_SETTINGS``)."""
    if name not in SUBSCRIBER_SETTINGS:
        raise ValueError(f"{name} is not a subscriber setting")
    session.execute(
        update(SubscriberRow).where(SubscriberRow.id == subscriber_id).values({name: value, "updated_at": now})
    )


def purge_subscriber(session: Session, subscriber_id: int) -> None:
    """Delete the row and everything that refers to it (privacy requests), and the
    digest bodies no other digest shows (a why line may name a paper of their library)."""
    query = select(Digest.body_key).where(Digest.subscriber_id == subscriber_id, Digest.body_key.is_not(None))
    keys = sorted({key for key in session.scalars(query) if key is not None})
    session.execute(delete(SubscriberRow).where(SubscriberRow.id == subscriber_id))
    drop_unshown_bodies(session, keys)
