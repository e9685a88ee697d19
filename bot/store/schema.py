"""Tables as SQLAlchemy 2 declarative models.  Change them only together with a
new Alembic revision in ``bot/migrations/versions`` (a test compares both).  The taste
stage's tables are in ``taste_tables``, what comes back from readers and their mail in
``response_tables``; both derive from ``base.Base``, whose metadata
the migrations compare."""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    Float,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Text,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column

from bot.store import channel_tables, derived_tables, llm_tables, response_tables, taste_tables, zotero_tables  # noqa: F401  (registers their tables with Base.metadata)
from bot.store.base import Base as Base  # imported from here, Base's metadata holds every table
from bot.store.base import UTCDateTime, partial_index


class Source(Base):
    """One dump file or fetched feed document, whatever its outcome."""

    __tablename__ = "sources"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    origin: Mapped[str] = mapped_column(String(8))  # "file" | "url"
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    mtime_ns: Mapped[int | None] = mapped_column(BigInteger)
    format: Mapped[str | None] = mapped_column(String(16))  # dump | rss | atom | jsonfeed
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    entries_count: Mapped[int] = mapped_column(Integer, default=0)
    new_count: Mapped[int] = mapped_column(Integer, default=0)
    updated_count: Mapped[int] = mapped_column(Integer, default=0)
    duplicate_of_id: Mapped[int | None] = mapped_column(ForeignKey("sources.id"))
    ingested_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        # Two processes ingesting the same bytes at once: the second insert fails.
        partial_index("uq_sources_ingested_sha256", "sha256", where="status = 'ingested'", unique=True),
        Index("ix_sources_path_stamp", "path", "size", "mtime_ns"),
    )


class Feed(Base):
    """HTTP validators per configured feed URL, so unchanged feeds cost a 304."""

    __tablename__ = "feeds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    url: Mapped[str] = mapped_column(Text, unique=True)
    etag: Mapped[str | None] = mapped_column(Text)
    last_modified: Mapped[str | None] = mapped_column(Text)
    last_fetched_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)


class Entry(Base):
    """One paper or repository, stored once whatever number of sources list it."""

    __tablename__ = "entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(8))
    title: Mapped[str] = mapped_column(Text)
    title_norm: Mapped[str] = mapped_column(Text)
    # identity.title_hash(title_norm), or NULL when the key already is
    # identity.title_key(title_norm) (most dump papers) or the entry is a repo:
    # one random index entry per new paper instead of two (see entries.py).
    title_hash: Mapped[int | None] = mapped_column(BigInteger)
    authors: Mapped[list[str]] = mapped_column(JSON)
    published: Mapped[date | None] = mapped_column(Date)
    summary: Mapped[str] = mapped_column(Text)
    summary_type: Mapped[str] = mapped_column(String(32))
    # The source whose appearance carries the current summary (digests pin it).
    summary_source_id: Mapped[int | None] = mapped_column(ForeignKey("sources.id"))
    links: Mapped[list[str]] = mapped_column(JSON)
    arxiv_id: Mapped[str | None] = mapped_column(String(40))
    doi: Mapped[str | None] = mapped_column(String(200))
    extra: Mapped[dict[str, str]] = mapped_column(JSON)
    first_seen_source_id: Mapped[int | None] = mapped_column(ForeignKey("sources.id"))
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # When an arXiv ``replace`` last changed its title or abstract, and what changed
    # (migration 0012): digests tell those who had it before.
    revised_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revision_note: Mapped[str | None] = mapped_column(Text)
    # When a paper was first given a code or model link, or a new one (migration 0022):
    # readers who keep it in their library are told (``bot.plan.news``).
    linked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        # Partial: most entries have neither id, and NULLs need no index entry.
        partial_index("uq_entries_arxiv_id", "arxiv_id", where="arxiv_id IS NOT NULL", unique=True),
        partial_index("ix_entries_title_hash", "title_hash", where="title_hash IS NOT NULL"),
        partial_index("ix_entries_revised_at", "revised_at", where="revised_at IS NOT NULL"),
        partial_index("ix_entries_linked_at", "linked_at", where="linked_at IS NOT NULL"),
        partial_index("uq_entries_doi", "doi", where="doi IS NOT NULL", unique=True),
    )


class AppearanceRow(Base):
    """Entry × source, with the summary variant that source carried.

    ``summary`` is NULL when the variant is the entry's current summary, so the
    usual case (a new entry, or a repeat with the same text) stores the text
    once.  Before ``entries.summary`` changes, the store writes the old text
    into the NULL rows of that entry (see ``store.entries``); readers use
    ``COALESCE(entry_appearances.summary, entries.summary)``.
    """

    __tablename__ = "entry_appearances"

    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"), primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"), primary_key=True, index=True)
    position: Mapped[int] = mapped_column(Integer)
    summary: Mapped[str | None] = mapped_column(Text)


class TagRow(Base):
    """A tag; ``name`` is case-folded so "GPU" and "gpu" are one tag."""

    __tablename__ = "tags"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    label: Mapped[str] = mapped_column(String(100))  # as first written


class EntryTag(Base):
    __tablename__ = "entry_tags"

    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"), primary_key=True)
    tag_id: Mapped[int] = mapped_column(ForeignKey("tags.id", ondelete="CASCADE"), primary_key=True, index=True)
    origin: Mapped[str] = mapped_column(String(16), primary_key=True)  # header | category | rule


class SubscriberRow(Base):
    """A person who receives digests.  ``email_key`` (case-folded normalized
    address) is what makes two spellings of one address the same subscriber."""

    __tablename__ = "subscribers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(320))
    email_key: Mapped[str] = mapped_column(String(320), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    filter: Mapped[str] = mapped_column(Text)  # canonical text of a filter that parsed
    timezone: Mapped[str] = mapped_column(String(64))
    send_hour: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), index=True)
    backfill: Mapped[str] = mapped_column(String(16))  # "7d", "0d", "all"
    unsubscribe_secret: Mapped[str] = mapped_column(String(64))
    bounces: Mapped[int] = mapped_column(Integer, default=0)  # permanent failures since last success
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The planner's watermark (migration 0005): entries first seen up to
    # planned_through were all weighed, valid while planned_key still matches.
    planned_through: Mapped[datetime | None] = mapped_column(UTCDateTime)
    planned_key: Mapped[str | None] = mapped_column(String(64))
    send_updates: Mapped[bool] = mapped_column(Boolean, server_default=true())
    cadence: Mapped[str] = mapped_column(String(16), server_default="daily")  # bot.plan.cadence
    # The model score above which an entry is ``liked`` (migration 0017; bot.taste.model).
    taste_threshold: Mapped[float] = mapped_column(Float, server_default="0.1")
    # When the last sign-up mail (confirmation or "already subscribed") went out.
    mailed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    language: Mapped[str | None] = mapped_column(String(35))  # their TL;DRs' (BCP 47); NULL: [llm]'s first


class Digest(Base):
    """One email to one subscriber.  At most one *scheduled* digest per
    subscriber and local day (partial unique index); manual sends and resends
    have their own kinds.  ``state`` walks queued -> sending -> sent |
    retry_wait -> ... | failed | unknown (``bot.store.queue`` says when); a
    ``sending`` row whose lease expired is taken again unless its message went on
    the wire (``wire_at``), which makes it ``unknown``."""

    __tablename__ = "digests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"))
    local_date: Mapped[date] = mapped_column(Date)
    kind: Mapped[str] = mapped_column(String(16))  # scheduled | manual | resend
    resend_of_id: Mapped[int | None] = mapped_column(ForeignKey("digests.id", ondelete="SET NULL"))
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime)
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When this attempt's message went on the wire (its lease held and the store writable
    # a moment before: ``queue.put_on_wire``); NULL until then, and again at each claim.
    wire_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    message_id: Mapped[str] = mapped_column(String(255))
    entry_count: Mapped[int] = mapped_column(Integer)
    pending_count: Mapped[int] = mapped_column(Integer, default=0)  # matching entries left for later
    smtp_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    planned_at: Mapped[datetime] = mapped_column(UTCDateTime)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Its items (``BodyItem``); NULL for a digest without any (empty, or a resend: its original's).
    body_key: Mapped[str | None] = mapped_column(String(32))
    # A scheduled day the planner found with nothing new: when it first did, and when it
    # last looked again (the day stays open until schedule.day_closes_hour).
    nothing_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Entries sent before and revised since, as this digest shows them (pinned for resends).
    updates: Mapped[list[dict[str, str]] | None] = mapped_column(JSON)
    # The subscriber's filter when the digest was planned (NULL: planned before 0018).
    filter: Mapped[str | None] = mapped_column(Text)
    # Its order drafted with an outside ranker, over its body's (``Interleaving``, JSON;
    # NULL: not interleaved, the body's order; migration 0029).
    interleaving: Mapped[str | None] = mapped_column(Text)
    # The language its TL;DRs are shown in, as written by ``planned_at`` (NULL: none; 0031).
    language: Mapped[str | None] = mapped_column(String(35))

    __table_args__ = (
        partial_index(
            "uq_digests_scheduled_day", "subscriber_id", "local_date", where="kind = 'scheduled'", unique=True
        ),
        # id last: claim_due reads due digests in (next_attempt_at, id) order from it.
        Index("ix_digests_due", "state", "next_attempt_at", "id"),
        # Resends are looked up by their original (resend --failed, stats, "on its way").
        partial_index("ix_digests_resend_of", "resend_of_id", where="resend_of_id IS NOT NULL"),
        # A subscriber's digests, and what a planning pass reads of those planned since
        # their window starts without reading the rows: which bodies (``ledger.bodies_since``,
        # migration 0026).
        Index("ix_digests_subscriber_planned", "subscriber_id", "planned_at", "body_key"),
        # Who a body's entries were sent to (``bot.store.ledger``: the planner reads the
        # claims of a batch of subscribers, a range of ids, on a day's entries), and
        # whether a body is still shown by some digest (retention, purge); migration 0021.
        partial_index("ix_digests_body_key_subscriber_id", "body_key", "subscriber_id", where="body_key IS NOT NULL"),
    )


class RevisionNotice(Base):
    """When a subscriber was last told that an entry they had was revised (arXiv
    ``replace``; migration 0021).  One row per (entry, subscriber) told: few, unlike
    the entries sent, which are their digests' bodies (``BodyItem``)."""

    __tablename__ = "revision_notices"
    __table_args__ = (PrimaryKeyConstraint("entry_id", "subscriber_id"),)

    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"))
    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"))
    reported_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BodyItem(Base):
    """One item of a digest body, in order: what digests with this ``body_key`` show of
    one entry.  The subscribers of one filter get the same items on one day, so an
    item is stored once per body, not once per subscriber.  The summary variant is
    pinned by ``summary_source_id``, the tags and link as shown, so a resend carries
    the same even after the entry changed.  Never changed once written (migration 0019).

    Who got which entry is read from here through ``digests.body_key``
    (``bot.store.ledger``): a digest with a body claims its entries for its
    subscriber; a resend, an empty day and a cancelled digest have none.  A row per
    (entry, subscriber) besides, with its indexes, cost 77 bytes on PostgreSQL and
    was most of what a subscriber-day stored (migration 0021)."""

    __tablename__ = "body_items"
    __table_args__ = (PrimaryKeyConstraint("body_key", "position"),)

    body_key: Mapped[str] = mapped_column(String(32))
    position: Mapped[int] = mapped_column(Integer)
    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"), index=True)
    summary_source_id: Mapped[int | None] = mapped_column(ForeignKey("sources.id"))
    why: Mapped[str] = mapped_column(Text)
    tags: Mapped[list[str]] = mapped_column(JSON)
    url: Mapped[str] = mapped_column(Text)  # where the title links
    # The subscriber's taste score for the entry when it was planned; NULL without a model (0017).
    taste: Mapped[float | None] = mapped_column(Float)
    # The reader's interest the item is shown under (``filters.sections_of``); NULL for a
    # filter of one interest (migration 0023).
    section: Mapped[str | None] = mapped_column(String(60))


class Retention(Base):
    """What ``database.keep_days`` removed so far (one row, id 1): digests planned
    before ``removed_before`` are gone, ``digests_removed`` of them in all
    (migration 0020).  ``history``, ``stats`` and the web version say so."""

    __tablename__ = "retention"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    removed_before: Mapped[datetime] = mapped_column(UTCDateTime)
    digests_removed: Mapped[int] = mapped_column(BigInteger)
    last_run_at: Mapped[datetime] = mapped_column(UTCDateTime)


class StoreFact(Base):
    """What a store knows of itself, one value per name (migration 0025):
    ``signing_key_id`` names the key its links are signed with (``bot.tokens``)."""

    __tablename__ = "store_facts"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
