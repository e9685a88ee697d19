"""The tables of a reader's Zotero library (``bot.zotero``): the connection, the items
synced from it and the papers the reader asked to save to it; and the journal's copy of
those asks.  ``bot.store.schema`` imports this module, so that ``Base.metadata`` holds
them; change them only with a new Alembic revision."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from bot.store.base import Base, UTCDateTime, partial_index


class ZoteroConnectionRow(Base):
    """A reader's connected library.  ``sealed_key`` is their API key sealed with the
    site's secrets key (``bot.sealed``): never stored, shown or backed up in clear.
    ``version`` is the library version synced up to (0: never synced); ``state`` one of
    ``bot.domain.zotero_states.ConnectionState``."""

    __tablename__ = "zotero_connections"

    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"), primary_key=True)
    library: Mapped[str] = mapped_column(String(40))  # "users/123" or "groups/456", the API's path
    sealed_key: Mapped[str] = mapped_column(Text)
    can_write: Mapped[bool] = mapped_column(Boolean, default=False)
    collections: Mapped[list[str]] = mapped_column(JSON, default=list)  # the keys that count ([]: all)
    save_into: Mapped[str | None] = mapped_column(String(16))  # the collection a saved paper goes into
    known_collections: Mapped[list[list[str]]] = mapped_column(JSON, default=list)  # [key, name] from the last sync
    version: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(12))
    problem: Mapped[str | None] = mapped_column(Text)  # the last failure, one line
    connected_at: Mapped[datetime] = mapped_column(UTCDateTime)
    synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    tried_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # the last sync begun, whatever came of it
    # The digest whose footer tells the reader the connection broke (said once).
    told_digest_id: Mapped[int | None] = mapped_column(Integer)


class ZoteroItemRow(Base):
    """An item of a reader's library as last synced, and the library paper it became
    (None: a note, an attachment, an item without a title or outside the chosen
    collections)."""

    __tablename__ = "zotero_items"
    # Whether another item still is a paper a changed or deleted one was (``remove_synced_papers``).
    __table_args__ = (Index("ix_zotero_items_paper", "subscriber_id", "paper_key"),)

    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"), primary_key=True)
    item_key: Mapped[str] = mapped_column(String(16), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    paper_key: Mapped[str | None] = mapped_column(String(200))


class ZoteroSaveRow(Base):
    """A paper a reader asked to save to their library.  ``write_token`` is sent with
    every attempt, so Zotero makes one item however often it is asked (412: it was
    made); ``state`` one of ``SaveState``."""

    __tablename__ = "zotero_saves"
    __table_args__ = (partial_index("ix_zotero_saves_pending", "subscriber_id", where="state = 'pending'"),)

    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"), primary_key=True)
    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"), primary_key=True)
    write_token: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(12))
    item_key: Mapped[str | None] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    problem: Mapped[str | None] = mapped_column(Text)
    asked_at: Mapped[datetime] = mapped_column(UTCDateTime)
    tried_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ZoteroSaveRequest(Base):
    """A "Save to Zotero" the page acknowledged, written before its answer (the journal,
    as ``UnsubscribeRequest``: a file of its own beside a SQLite store, a table of a
    PostgreSQL one); ``applied`` once it is a ``ZoteroSaveRow``."""

    __tablename__ = "zotero_save_requests"
    __table_args__ = (partial_index("ix_zotero_save_requests_pending", "subscriber_id", where="NOT applied"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # uuid4 hex
    subscriber_id: Mapped[int] = mapped_column(Integer)
    entry_id: Mapped[int] = mapped_column(Integer)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime)
    applied: Mapped[bool] = mapped_column(Boolean, default=False)
