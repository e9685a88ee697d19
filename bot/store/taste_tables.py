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

from bot.store.base import Base, UTCDateTime


class LibraryPaperRow(Base):
    """A paper a subscriber vouches for (``bot.taste.library``), keyed as entries are,
    and the stored entry it is, when there is one."""

    __tablename__ = "library_papers"
    __table_args__ = (UniqueConstraint("subscriber_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    entry_id: Mapped[int | None] = mapped_column(ForeignKey("entries.id", ondelete="SET NULL"))
    title: Mapped[str] = mapped_column(Text)
    abstract: Mapped[str] = mapped_column(Text, server_default="")
    source: Mapped[str] = mapped_column(String(16))
    added_at: Mapped[datetime] = mapped_column(UTCDateTime)


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
    ``signals`` is what it was trained from; a change trains it again."""

    __tablename__ = "taste_models"

    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"), primary_key=True)
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
