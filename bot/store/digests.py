"""Store: digests as commands and pages read them (``DigestRow``), resend look-ups and
per-day counts.  SQL only; the delivery queue (claims, leases, outcomes, bounces) is
``queue``'s, the ledger ``ledger``'s, what a digest carries ``contents``'."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from pathlib import PurePath
from typing import Any

from sqlalchemy import Row, and_, case, exists, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from bot.domain import DigestKind, DigestState, SubscriberStatus
from bot.domain.stored import stored_hour, stored_zone
from bot.store.bulk import chunks
from bot.store.queue import LIVE_STATES
from bot.store.row_shapes import RowShape
from bot.store.schema import BodyItem, Digest, Entry, Source, SubscriberRow


def set_message_id(session: Session, digest_id: int, message_id: str) -> None:
    session.execute(update(Digest).where(Digest.id == digest_id).values(message_id=message_id))


@dataclass(frozen=True, slots=True)
class DigestRow:
    id: int
    subscriber_id: int
    subscriber_email: str
    local_date: date
    kind: DigestKind
    state: DigestState
    attempts: int
    entry_count: int
    message_id: str
    smtp_code: int | None
    last_error: str | None
    planned_at: datetime
    sent_at: datetime | None
    resend_of: int | None
    lease_owner: str | None
    wire_at: datetime | None = None  # when its last attempt went on the wire
    subscriber_timezone: str = "UTC"
    subscriber_send_hour: int = 0
    nothing_at: datetime | None = None  # a scheduled day first found empty, then
    arrived: str | None = None  # the source that brought its newest entry (list_digests)


DIGEST = RowShape(
    DigestRow,
    columns={"resend_of": "resend_of_id"},
    computed=("subscriber_email", "subscriber_timezone", "subscriber_send_hour", "arrived"),
)


def _with_subscriber() -> Any:
    return select(Digest, SubscriberRow.email, SubscriberRow.timezone, SubscriberRow.send_hour).join(
        SubscriberRow, SubscriberRow.id == Digest.subscriber_id
    )


def _row(found: Row[tuple[Digest, str, str, int]]) -> DigestRow:
    """A digest with its subscriber's columns, read by name (``_with_subscriber``)."""
    return DIGEST.of(
        found.Digest,
        subscriber_email=found.email,
        subscriber_timezone=stored_zone(found.timezone),
        subscriber_send_hour=stored_hour(found.send_hour),
    )


def get_digest(session: Session, digest_id: int) -> DigestRow | None:
    found = session.execute(_with_subscriber().where(Digest.id == digest_id)).first()
    return _row(found) if found else None


def get_digests(session: Session, digest_ids: Sequence[int]) -> list[DigestRow]:
    """The digests that exist among *digest_ids*, in that order."""
    found: dict[int, DigestRow] = {}
    for part in chunks(list(digest_ids)):
        found.update(
            (row.Digest.id, _row(row)) for row in session.execute(_with_subscriber().where(Digest.id.in_(part)))
        )
    return [found[i] for i in digest_ids if i in found]


def list_digests(
    session: Session,
    *,
    subscriber_id: int | None = None,
    state: DigestState | None = None,
    local_date: date | None = None,
    kind: DigestKind | None = None,
    limit: int | None = None,
) -> list[DigestRow]:
    query = _with_subscriber()
    if subscriber_id is not None:
        query = query.where(Digest.subscriber_id == subscriber_id)
    if state is not None:
        query = query.where(Digest.state == state.value)
    if local_date is not None:
        query = query.where(Digest.local_date == local_date)
    if kind is not None:
        query = query.where(Digest.kind == kind.value)
    query = query.order_by(Digest.id.desc())
    if limit is not None:
        query = query.limit(limit)
    rows = [_row(row) for row in session.execute(query)]
    filled = [r.id for r in rows if r.nothing_at is not None and r.state is not DigestState.EMPTY]
    arrived = _arrivals(session, filled) if filled else {}
    return [replace(r, arrived=arrived[r.id]) if r.id in arrived else r for r in rows]


def _arrivals(session: Session, digest_ids: Sequence[int]) -> dict[int, str]:
    """Per digest, the source that first brought the newest of its entries (a file by its
    name, a feed by its URL)."""
    newest: dict[int, tuple[datetime, str]] = {}
    for part in chunks(list(digest_ids)):
        rows = session.execute(
            select(Digest.id, Entry.first_seen_at, Source.path, Source.origin)
            .join(BodyItem, BodyItem.body_key == Digest.body_key)
            .join(Entry, Entry.id == BodyItem.entry_id)
            .join(Source, Source.id == Entry.first_seen_source_id)
            .where(Digest.id.in_(part))
        )
        for digest_id, seen_at, path, origin in rows:
            if digest_id not in newest or seen_at > newest[digest_id][0]:
                newest[digest_id] = (seen_at, PurePath(path).name if origin == "file" else path)
    return {digest_id: path for digest_id, (_, path) in newest.items()}


# A resend that went out, or may still go out: its original needs no other.
RESEND_DELIVERED = (DigestState.SENT.value,)


RESEND_PENDING = (DigestState.QUEUED.value, DigestState.SENDING.value, DigestState.RETRY_WAIT.value)


def _resends_of(original: Any, states: Sequence[str]) -> Any:
    resend = aliased(Digest)
    return exists().where(
        resend.resend_of_id == original.id, resend.kind == DigestKind.RESEND.value, resend.state.in_(states)
    )


# What a resend settles: a digest that failed, or whose outcome is unknown.
RESENDABLE = (DigestState.FAILED.value, DigestState.UNKNOWN.value)


def without_resend(session: Session, state: DigestState) -> list[int]:
    """Digests in *state* (resends aside) that no resend has delivered or is delivering."""
    return list(
        session.scalars(
            select(Digest.id)
            .where(
                Digest.state == state.value,
                Digest.kind != DigestKind.RESEND.value,
                ~_resends_of(Digest, RESEND_DELIVERED + RESEND_PENDING),
            )
            .order_by(Digest.id)
        )
    )


def pending_resend_of(session: Session, digest_id: int) -> int | None:
    """A resend of *digest_id* that is still on its way, if there is one."""
    return session.scalar(
        select(Digest.id)
        .where(
            Digest.resend_of_id == digest_id, Digest.kind == DigestKind.RESEND.value, Digest.state.in_(RESEND_PENDING)
        )
        .limit(1)
    )


def lock_digest(session: Session, digest_id: int) -> None:
    """Hold *digest_id*'s row until the transaction ends (PostgreSQL; SQLite writes one at a time)."""
    session.execute(select(Digest.id).where(Digest.id == digest_id).with_for_update())


def stats_by_day(session: Session) -> list[tuple[date, dict[str, int]]]:
    """Digests per local day and state, each counted once by its outcome: a failed (or
    unknown) digest whose resend was delivered counts as sent, one whose resend is on its
    way as pending (``retry_wait``); resends themselves are counted apart, as ``resent``."""
    resendable = Digest.state.in_(RESENDABLE)
    state = case(
        (and_(resendable, _resends_of(Digest, RESEND_DELIVERED)), DigestState.SENT.value),
        (and_(resendable, _resends_of(Digest, RESEND_PENDING)), DigestState.RETRY_WAIT.value),
        else_=Digest.state,
    )
    kind = case((Digest.kind == DigestKind.RESEND.value, "resent"), else_=state)
    rows = session.execute(
        select(Digest.local_date, kind, func.count())
        .where(or_(Digest.kind != DigestKind.RESEND.value, Digest.state == DigestState.SENT.value))
        .group_by(Digest.local_date, kind)
    )
    days: dict[date, dict[str, int]] = {}
    for day, outcome, count in rows:
        days.setdefault(day, {})[outcome] = count
    return sorted(days.items(), reverse=True)


def bounced_by_day(session: Session) -> dict[date, int]:
    rows = session.execute(
        select(Digest.local_date, func.count())
        .join(SubscriberRow, SubscriberRow.id == Digest.subscriber_id)
        .where(SubscriberRow.status == SubscriberStatus.BOUNCED.value, Digest.state == DigestState.FAILED.value)
        .group_by(Digest.local_date)
    )
    return {day: count for day, count in rows}


def last_digest_with_entries(session: Session, subscriber_id: int) -> tuple[date, datetime] | None:
    """The local day and planning time of *subscriber_id*'s latest digest that carried
    entries (sent, or on its way), if any."""
    found = session.execute(
        select(Digest.local_date, Digest.planned_at)
        .where(
            Digest.subscriber_id == subscriber_id,
            Digest.entry_count > 0,
            Digest.state.in_([state.value for state in (DigestState.SENT, *LIVE_STATES, DigestState.UNKNOWN)]),
        )
        .order_by(Digest.planned_at.desc())
        .limit(1)
    ).first()
    return (found[0], found[1]) if found is not None else None
