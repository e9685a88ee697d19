"""The language-model stage's tables (``bot.llm``): each entry's TL;DR per language, each
paper's embedding and each reader's model on them, and the requests and tokens spent
each day.  ``bot.store.schema`` imports this module, so
that ``Base.metadata`` holds them; change them only with a new Alembic revision."""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import Date, Float, ForeignKey, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from bot.store.base import Base, UTCDateTime

LANGUAGE_TAG_LENGTH = 35  # BCP 47's longest tag in common use, as CLDR keeps them


class EntryTldrRow(Base):
    """One entry's TL;DR in one language, as ``bot.llm.tldr.tldr_of`` let it through,
    with the model that wrote it and when: asked once per (entry, language)."""

    __tablename__ = "entry_tldrs"

    entry_id: Mapped[int] = mapped_column(ForeignKey("entries.id", ondelete="CASCADE"), primary_key=True)
    language: Mapped[str] = mapped_column(String(LANGUAGE_TAG_LENGTH), primary_key=True)
    text: Mapped[str] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(200))
    written_at: Mapped[datetime] = mapped_column(UTCDateTime)


class LlmUsageRow(Base):
    """What one UTC day spent of ``[llm]``'s budget: requests sent, tokens reported."""

    __tablename__ = "llm_usage"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    requests: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(Integer)


class EmbeddingRow(Base):
    """One paper's embedding, keyed as entries and library papers are (an entry and the
    library paper it is share one), by the model named: a unit vector as little-endian
    half floats (``bot.domain.llm.packed``).  Another model's row is embedded again."""

    __tablename__ = "embeddings"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    model: Mapped[str] = mapped_column(String(200))
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    embedded_at: Mapped[datetime] = mapped_column(UTCDateTime)


class EmbeddingModelRow(Base):
    """A reader's model on the embeddings *model* made (``bot.taste.embedded``): weights
    as little-endian float32, trained from what *signal* fingerprints (their library and
    ratings, as ``taste_signals``) at *trained_at*, with *papers* of theirs embedded."""

    __tablename__ = "embedding_models"

    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscribers.id", ondelete="CASCADE"), primary_key=True)
    model: Mapped[str] = mapped_column(String(200))
    signal: Mapped[str] = mapped_column(String(64))
    weights: Mapped[bytes] = mapped_column(LargeBinary)
    intercept: Mapped[float] = mapped_column(Float)
    papers: Mapped[int] = mapped_column(Integer)
    trained_at: Mapped[datetime] = mapped_column(UTCDateTime)
