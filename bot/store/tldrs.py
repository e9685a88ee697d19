"""The store's part of the language-model stage: each entry's TL;DR per language, the
languages readers chose, and each day's spending against ``[llm]``'s budget.  SQL only:
never asks a model, never judges an answer (``bot.llm`` does both)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from bot.domain import SubscriberStatus
from bot.domain.llm import Tldr
from bot.store.bulk import among, chunks
from bot.store.facts import MODEL_PAUSE_FACT, fact, set_fact
from bot.store.llm_tables import EntryTldrRow, LlmUsageRow
from bot.store.row_shapes import RowShape
from bot.store.schema import SubscriberRow

MOST_COUNTED = 2**31 - 1  # an INTEGER column's largest value on PostgreSQL


def save_tldr(session: Session, entry_id: int, tldr: Tldr) -> bool:
    """Keep *tldr* for *entry_id*; False (nothing changed) when the entry has one in that
    language already, also one another process wrote a moment ago: a TL;DR is asked for
    once, and a resend shows what was sent."""
    build = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    values = {"entry_id": entry_id, "language": tldr.language, "text": tldr.text}
    statement = build(EntryTldrRow).values(values | {"model": tldr.model, "written_at": tldr.written_at})
    kept = session.execute(statement.on_conflict_do_nothing().returning(EntryTldrRow.entry_id))
    return kept.scalar_one_or_none() is not None


TLDR = RowShape(Tldr)


def tldrs_for(session: Session, entry_ids: Sequence[int], language: str) -> dict[int, Tldr]:
    """The TL;DRs of *entry_ids* in *language*, by entry; an entry without one is absent."""
    found: dict[int, Tldr] = {}
    for part in chunks(list(entry_ids)):
        rows = session.scalars(
            select(EntryTldrRow).where(among(session, EntryTldrRow.entry_id, part), EntryTldrRow.language == language)
        )
        for row in rows:
            found[row.entry_id] = TLDR.of(row)
    return found


def without_tldr(session: Session, entry_ids: Sequence[int], language: str) -> list[int]:
    """Those of *entry_ids* with no TL;DR in *language*, in the order given."""
    have = set(tldrs_for(session, entry_ids, language))
    return [entry_id for entry_id in entry_ids if entry_id not in have]


def reader_filters(session: Session, default: str) -> list[tuple[str, str, int]]:
    """(filter, language, readers) of the active readers: how many chose each filter and
    language (those who chose no language: *default*)."""
    rows = session.execute(
        select(SubscriberRow.filter, SubscriberRow.language, func.count())
        .where(SubscriberRow.status == SubscriberStatus.ACTIVE.value)
        .group_by(SubscriberRow.filter, SubscriberRow.language)
    )
    return [(text, language or default, count) for text, language, count in rows]


def set_language(session: Session, subscriber_id: int, language: str | None, now: datetime) -> None:
    """A reader's TL;DR language (None: the operator's first)."""
    session.execute(
        update(SubscriberRow).where(SubscriberRow.id == subscriber_id).values(language=language, updated_at=now)
    )


def spent_on(session: Session, day: date) -> tuple[int, int]:
    """The requests sent and tokens reported on the UTC *day*."""
    row = session.get(LlmUsageRow, day)
    return (row.requests, row.tokens) if row is not None else (0, 0)


def add_spending(session: Session, day: date, requests: int, tokens: int) -> None:
    """Count *requests* and *tokens* against the UTC *day* (the row made on its first;
    nothing spent, nothing written)."""
    if not (requests or tokens):
        return
    row = session.get(LlmUsageRow, day, with_for_update=True)
    if row is None:
        row = LlmUsageRow(day=day, requests=0, tokens=0)
        session.add(row)
    # What a model reports is outside bytes: a day's count stops at what the column holds.
    row.requests = min(row.requests + requests, MOST_COUNTED)
    row.tokens = min(row.tokens + tokens, MOST_COUNTED)
    session.flush()


def model_paused_until(session: Session, base_url: str) -> datetime | None:
    """Until when the model behind *base_url* asked to be sent nothing (its last 429's
    ``Retry-After``), as every pass and process reads it; None when it did not."""
    stored = fact(session, MODEL_PAUSE_FACT) or ""
    until, _, url = stored.partition("|")
    if url != base_url:
        return None
    try:
        moment = datetime.fromisoformat(until)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def set_model_paused_until(session: Session, base_url: str, until: datetime) -> None:
    set_fact(session, MODEL_PAUSE_FACT, f"{until.isoformat()}|{base_url}")
