"""The taste stage's tables (``bot.taste``): a reader's library, their feedback, the
TF-IDF vocabulary and each reader's model.  ``bot.store.schema`` imports this module, so
that ``Base.metadata`` holds them; change them only with a new Alembic revision."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from bot.store.base import Base, UTCDateTime, partial_index


class LibraryPaperRow(Base):
    """A paper a subscriber vouches for (``bot.taste.library``), keyed as entries are,
    and the stored entry it is, when there is one: matched when it is added, or when
    an entry with its key, arXiv id, DOI or title arrives (``match_arrivals``)."""

    __tablename__ = "library_papers"
    __table_args__ = (
        UniqueConstraint("subscriber_id", "key"),
        # Planning looks up who keeps the few entries with news; ingest, the papers still
        # waiting for their entry: each index holds only the rows it is for.
        partial_index("ix_library_papers_entry_id", "entry_id", where="entry_id IS NOT NULL"),
        partial_index("ix_library_papers_unmatched_key", "key", where="entry_id IS NULL"),
        partial_index(
            "ix_library_papers_unmatched_title_key", "title_key", where="entry_id IS NULL AND title_key IS NOT NULL"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    entry_id: Mapped[int | None] = mapped_column(ForeignKey("entries.id", ondelete="SET NULL"))
    title: Mapped[str] = mapped_column(Text)
    abstract: Mapped[str] = mapped_column(Text, server_default="")
    source: Mapped[str] = mapped_column(String(16))
    added_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The key its title alone would give (``identity.title_key``), for a paper the
    # export named by an identifier: an entry listed by title only is matched by it.
    title_key: Mapped[str | None] = mapped_column(String(40))
    # When its reader was last told news of it (``bot.plan.news``).
    told_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class TasteVocabulary(Base):
    """The TF-IDF vocabulary fitted on the store (``bot.taste.features``); a newer one
    replaces it as the store grows, and the models are trained in it again."""

    __tablename__ = "taste_vocabularies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fitted_at: Mapped[datetime] = mapped_column(UTCDateTime)
    entries: Mapped[int] = mapped_column(Integer)  # how many entries it was fitted on
    terms: Mapped[list[str]] = mapped_column(JSON)
    idf: Mapped[bytes] = mapped_column(LargeBinary)  # float32, one per term


class TasteModel(Base):
    """A subscriber's model (``bot.taste.model``): its kept weights as int32 term indices
    and float32 values, and its library papers' strongest terms (to name the nearest).
    ``section`` is '' for the model of all they keep and rate, else the name of the
    interest it ranks.  ``signals`` is what it was trained from; a change trains it again."""

    __tablename__ = "taste_models"

    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"), primary_key=True)
    section: Mapped[str] = mapped_column(String(60), primary_key=True, server_default="")
    vocabulary_id: Mapped[int] = mapped_column(Integer)
    signals: Mapped[str] = mapped_column(String(64))
    trained_at: Mapped[datetime] = mapped_column(UTCDateTime)
    intercept: Mapped[float] = mapped_column(Float)
    indices: Mapped[bytes] = mapped_column(LargeBinary)
    weights: Mapped[bytes] = mapped_column(LargeBinary)
    library: Mapped[list[list[str]]] = mapped_column(JSON)  # [title, base64 indices, base64 values] per paper


class Feedback(Base):
    """A subscriber's "more like this" or "less like this" on an entry, from their digest
    (``bot.taste``): a positive or a negative for their model.  Undone by deleting it."""

    __tablename__ = "feedback"
    __table_args__ = (PrimaryKeyConstraint("subscriber_id", "entry_id"),)

    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"))
    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"), index=True)
    verdict: Mapped[str] = mapped_column(String(8))  # more | less
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The interest the entry was shown under ('' for a digest of one): it trains that interest's model.
    section: Mapped[str] = mapped_column(String(60), server_default="")
