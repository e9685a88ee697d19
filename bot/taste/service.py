"""Taste stage, the service: a subscriber's library read from a file, listed, changed.
Composes ``library`` (pure) and ``bot.store.library`` (SQL); never renders or sends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from bot.domain import LibraryPaper
from bot.store.engine import transaction
from bot.store.library import add_papers, library_of, remove_papers
from bot.taste.library import read_library


@dataclass(frozen=True, slots=True)
class LibraryImport:
    added: list[LibraryPaper]
    already: int  # papers the library held before
    problems: list[str]  # one line per record that could not be read
    format: str


def import_library(factory: sessionmaker[Session], subscriber_id: int, data: bytes, now: datetime) -> LibraryImport:
    """Add what an export holds to the subscriber's library (``LibraryFileError`` when
    the file cannot be read at all; bad records are listed, the rest is added)."""
    read = read_library(data)
    with transaction(factory) as session:
        added = add_papers(session, subscriber_id, read.papers, now)
    return LibraryImport(added, len(read.papers) - len(added), read.problems, read.format)


def library(factory: sessionmaker[Session], subscriber_id: int) -> list[LibraryPaper]:
    with factory() as session:
        return library_of(session, subscriber_id)


def remove_from_library(factory: sessionmaker[Session], subscriber_id: int, keys: list[str]) -> int:
    with transaction(factory) as session:
        return remove_papers(session, subscriber_id, keys)
