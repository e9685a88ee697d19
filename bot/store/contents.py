"""Store: what a digest carries, read from its body with the entries and the pinned
summary variants (``ContentCache`` keeps them across a delivery run).  SQL only; never writes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Text, func, select, type_coerce
from sqlalchemy.orm import Session, aliased

from bot.domain import DigestContent, DigestItem, Subscriber, UpdateLine
from bot.domain.llm import Tldr
from bot.domain.rankers import Interleaving
from bot.store.bulk import chunks
from bot.store.entry_content import CONTENT_COLUMNS, content_of
from bot.store.ledger import ItemRow
from bot.store.schema import AppearanceRow, BodyItem, Digest, Entry, SubscriberRow
from bot.store.subscribers import _view as subscriber_view
from bot.store.tldrs import tldrs_for
from bot.store.zotero import NOT_CONNECTED, zotero_shown

_ENTRY_COLUMNS = (Entry.id, Entry.updated_at, Entry.key, *CONTENT_COLUMNS)


class ContentCache:
    """Entries and digest items kept from one batch of a delivery to the next.

    A day's digests carry a few hundred entries between them, and reading each
    entry again for every batch of 200 messages was half the cost of building
    them.  An entry is reused while its ``updated_at`` is unchanged: ingest
    sets it in the same transaction that changes any of its fields or the
    summary variants pinned to it.  Use one cache for one delivery run; it
    forgets everything when it holds more than ``LIMIT`` items."""

    LIMIT = 20_000

    def __init__(self) -> None:
        self.entries: dict[int, tuple[datetime, Any]] = {}  # id -> (updated_at, row of _ENTRY_COLUMNS)
        self.pinned: dict[tuple[int, int], str] = {}  # (entry, source) -> that source's summary variant
        self.items: dict[tuple[ItemRow, datetime], DigestItem] = {}
        # body_key -> its items: digests of one body read them once.
        self.bodies: dict[str, list[ItemRow]] = {}
        # (entry, language) -> its TL;DR: written once, never replaced, so kept once read.
        self.tldrs: dict[tuple[int, str], Tldr] = {}
        self.told: dict[tuple[ItemRow, datetime, Tldr], DigestItem] = {}

    def load(self, session: Session, entry_ids: list[int]) -> None:
        """Make sure every entry of *entry_ids* and its pinned summary variants are current.

        All of an entry's variants are read with it: a variant is only ever
        added or filled in by the ingest that changes the entry (see
        ``upsert_source_entries``), so they are as current as the entry."""
        if len(self.items) + len(self.bodies) > self.LIMIT:
            self.entries.clear()
            self.pinned.clear()
            self.items.clear()
            self.bodies.clear()
            self.tldrs.clear()
            self.told.clear()
        stale = []
        for part in chunks(entry_ids):
            for entry_id, updated_at in session.execute(select(Entry.id, Entry.updated_at).where(Entry.id.in_(part))):
                known = self.entries.get(entry_id)
                if known is None or known[0] != updated_at:
                    stale.append(entry_id)
        for part in chunks(stale):
            for entry in session.execute(select(*_ENTRY_COLUMNS).where(Entry.id.in_(part))):
                self.entries[entry.id] = (entry.updated_at, entry)
            for entry_id, source_id, summary in session.execute(
                select(AppearanceRow.entry_id, AppearanceRow.source_id, AppearanceRow.summary).where(
                    AppearanceRow.entry_id.in_(part)
                )
            ):
                if summary is None:  # NULL: the entry's current summary
                    self.pinned.pop((entry_id, source_id), None)
                else:
                    self.pinned[(entry_id, source_id)] = summary

    def load_tldrs(self, session: Session, wanted: set[tuple[int, str]]) -> None:
        """Read the TL;DRs of *wanted* (entry, language) pairs not known yet: one written
        since the last read may belong in a digest planned since."""
        by_language: dict[str, list[int]] = {}
        for entry_id, language in wanted - self.tldrs.keys():
            by_language.setdefault(language, []).append(entry_id)
        for language, entry_ids in sorted(by_language.items()):
            for entry_id, tldr in tldrs_for(session, sorted(entry_ids), language).items():
                self.tldrs[(entry_id, language)] = tldr

    def item_told(self, row: ItemRow, language: str | None, by: datetime) -> DigestItem:
        """``item`` with the entry's TL;DR in *language* as written *by* then (what a
        digest planned then shows, and its resends after it)."""
        found = self.item(row)
        tldr = self.tldrs.get((row[0], language)) if language is not None else None
        if tldr is None or tldr.written_at > by:
            return found
        key = (row, self.entries[row[0]][0], tldr)
        told = self.told.get(key)
        if told is None:
            told = self.told[key] = replace(found, tldr=tldr)
        return told

    def item(self, row: ItemRow) -> DigestItem:
        entry_id, source_id, why, tags, url, taste, section = row
        updated_at, entry = self.entries[entry_id]
        key = (row, updated_at)
        found = self.items.get(key)
        if found is None:
            # The summary variant pinned at planning time (COALESCE(appearance, entry) as elsewhere).
            summary = self.pinned.get((entry_id, source_id), entry.summary) if source_id is not None else entry.summary
            found = self.items[key] = DigestItem(
                entry.key, content_of(entry, summary), tags, why, url=url, taste=taste, section=section or ""
            )
        return found


def digest_content(session: Session, digest_id: int) -> DigestContent:
    """What a digest carries, from its body (a resend shows its original's)."""
    return digest_contents(session, [digest_id])[digest_id]


def digest_contents(
    session: Session, digest_ids: Sequence[int], cache: ContentCache | None = None
) -> dict[int, DigestContent]:
    """``digest_content`` for many digests in a few queries (the send path's batch).
    One ``DigestItem`` object per distinct item, shared by the digests carrying it
    (and by later batches, through *cache*)."""
    cache = cache if cache is not None else ContentCache()
    heads = _heads(session, digest_ids)
    rows = _rows_by_digest(session, heads, cache)
    cache.load(session, sorted({row[0] for found in rows.values() for row in found}))
    told = {head.digest_id: _told_as(head) for head in heads}
    wanted = {(row[0], language) for n, (language, _) in told.items() if language for row in rows.get(n, ())}
    if wanted:
        cache.load_tldrs(session, wanted)
    zotero = zotero_shown(session, [(h.digest_id, subscriber_view(h).id, h.resend_of_id) for h in heads])
    return {
        head.digest_id: DigestContent(
            digest_id=head.digest_id,
            kind=head.kind,
            local_date=head.local_date,
            subscriber=_as_planned(subscriber_view(head), head),
            items=tuple(cache.item_told(row, *told[head.digest_id]) for row in rows.get(head.digest_id, ())),
            pending=head.pending_count,
            resend_of=head.resend_of_id,
            updates=_updates(head.original_updates if head.resend_of_id else head.own_updates),
            zotero_save=zotero.get(head.digest_id, NOT_CONNECTED)[0],
            zotero_broken=zotero.get(head.digest_id, NOT_CONNECTED)[1],
        )
        for head in heads
    }


def _told_as(head: Any) -> tuple[str | None, datetime]:
    """The language a digest shows TL;DRs in and the moment they must have been written
    by: pinned when it was planned (a resend: its original's)."""
    if head.resend_of_id:
        return head.original_language, head.original_planned_at
    return head.digest_language, head.digest_planned_at


def _as_planned(subscriber: Subscriber, head: Any) -> Subscriber:
    """The subscriber as the digest shows them: with the filter it was chosen with."""
    planned = head.planned_filter
    return subscriber if planned is None or planned == subscriber.filter else replace(subscriber, filter=planned)


def _updates(pinned: Any) -> tuple[UpdateLine, ...]:
    """The revised entries and library news a digest tells of, as the planner pinned them."""
    if not isinstance(pinned, list):
        return ()
    return tuple(
        UpdateLine(str(u.get("title", "")), str(u.get("note", "")), str(u.get("url", "")), u.get("library") is True)
        for u in pinned
        if isinstance(u, dict)
    )


def _heads(session: Session, digest_ids: Sequence[int]) -> list[Any]:
    """Each digest's own columns and its subscriber's."""
    heads: list[Any] = []
    original = aliased(Digest)
    for part in chunks(list(digest_ids)):
        heads += session.execute(
            select(
                Digest.id.label("digest_id"),
                Digest.kind,
                Digest.local_date,
                Digest.resend_of_id,
                Digest.pending_count,
                Digest.body_key,
                original.body_key.label("original_body_key"),
                Digest.interleaving,
                original.interleaving.label("original_interleaving"),  # a resend shows its original's order
                Digest.updates.label("own_updates"),
                original.updates.label("original_updates"),  # a resend shows its original's
                func.coalesce(original.filter, Digest.filter).label("planned_filter"),
                Digest.language.label("digest_language"),
                Digest.planned_at.label("digest_planned_at"),
                original.language.label("original_language"),
                original.planned_at.label("original_planned_at"),
                *SubscriberRow.__table__.c,
            )
            .join(SubscriberRow, SubscriberRow.id == Digest.subscriber_id)
            .outerjoin(original, original.id == Digest.resend_of_id)
            .where(Digest.id.in_(part))
        ).all()
    return heads


def _rows_by_digest(session: Session, heads: list[Any], cache: ContentCache) -> dict[int, list[ItemRow]]:
    """The items each digest (or, for a resend, its original) carries: its body's, read
    once for every digest with the same body (and kept in *cache*), in the order an
    interleaving pinned on the digest gives them (``Interleaving``)."""
    keys = {head.digest_id: head.original_body_key if head.resend_of_id else head.body_key for head in heads}
    unread = sorted({key for key in keys.values() if key is not None and key not in cache.bodies})
    for part in chunks(unread):
        found = session.execute(
            select(
                BodyItem.body_key,
                BodyItem.entry_id,
                BodyItem.summary_source_id,
                BodyItem.why,
                type_coerce(BodyItem.tags, Text),
                BodyItem.url,
                BodyItem.taste,
                BodyItem.section,
            )
            .where(BodyItem.body_key.in_(part))
            .order_by(BodyItem.body_key, BodyItem.position)
        )
        for key in part:
            cache.bodies[key] = []
        for key, entry_id, source_id, why, tags, url, taste, section in found:
            cache.bodies[key].append((entry_id, source_id, why, _tags(tags), url, taste, section))
    shown = {}
    for head in heads:
        if (key := keys[head.digest_id]) is not None:
            rows = cache.bodies[key]
            drafted = head.original_interleaving if head.resend_of_id else head.interleaving
            pinned = Interleaving.from_text(drafted, len(rows)) if drafted else None
            shown[head.digest_id] = rows if pinned is None else [rows[n] for n in pinned.order]
    return shown


@lru_cache(maxsize=4096)
def _tags_of_json(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text))


def _tags(value: str | list[str]) -> tuple[str, ...]:
    """A body item's tags: JSON text read raw and decoded once per distinct value
    (PostgreSQL's driver hands json columns over decoded already)."""
    return _tags_of_json(value) if isinstance(value, str) else tuple(value)
