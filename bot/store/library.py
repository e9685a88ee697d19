"""Library papers (``bot.taste.library``): SQL only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from bot.domain import LibraryPaper
from bot.domain.identity import normalize_title, title_hash, title_key
from bot.store.bulk import chunks
from bot.store.entries import entries_matching
from bot.store.schema import Entry
from bot.store.taste_tables import LibraryPaperRow

_MATCHED_BY = ("key", "arxiv_id", "doi", "title_norm")  # in this order of precedence


def stored_entries(session: Session, papers: Sequence[LibraryPaper]) -> dict[str, int]:
    """The stored entry each paper is, by the paper's key: the one with its key, arXiv
    id or DOI, else the one with its normalized title (an entry known by title alone is
    keyed by it, another one has its hash indexed)."""
    norms = {p.key: normalize_title(p.title) for p in papers if p.title}
    by = _entries_by(session, papers, [n for n in norms.values() if n])
    found: dict[str, int] = {}
    for paper in papers:
        values = (paper.key, paper.arxiv_id, paper.doi, norms.get(paper.key))
        entry_id = next((by[n][v] for n, v in zip(_MATCHED_BY, values, strict=True) if v and v in by[n]), None)
        if entry_id is not None:
            found[paper.key] = entry_id
    return found


def _entries_by(session: Session, papers: Sequence[LibraryPaper], norms: list[str]) -> dict[str, dict[str, int]]:
    """Per column of ``_MATCHED_BY``, value -> entry id, for the entries any paper may be."""
    rows = list(
        entries_matching(
            session,
            ["id", *_MATCHED_BY],
            arxiv_ids=sorted({p.arxiv_id for p in papers if p.arxiv_id}),
            dois=sorted({p.doi for p in papers if p.doi}),
            keys=sorted({p.key for p in papers} | {title_key(n) for n in norms}),
            title_hashes=sorted({title_hash(n) for n in norms}),
        )
    )
    return {name: {row[name]: row["id"] for row in rows if row[name]} for name in _MATCHED_BY}


def add_papers(
    session: Session, subscriber_id: int, papers: Sequence[LibraryPaper], now: datetime, *, most: int | None = None
) -> tuple[list[LibraryPaper], int]:
    """Add the papers the subscriber's library does not hold yet, in order, until it
    holds *most*; the ones added, with the stored entry each one is, and how many new
    ones did not fit."""
    held = set(session.scalars(select(LibraryPaperRow.key).where(LibraryPaperRow.subscriber_id == subscriber_id)))
    new = [p for p in papers if p.key not in held]
    room = len(new) if most is None else max(0, most - len(held))
    new, over = new[:room], len(new) - min(room, len(new))
    if not new:
        return [], over
    entries = stored_entries(session, new)
    added = [LibraryPaper(p.key, p.title, p.abstract, p.arxiv_id, p.doi, entries.get(p.key), p.source) for p in new]
    session.execute(
        insert(LibraryPaperRow),
        [
            {
                "subscriber_id": subscriber_id,
                "key": p.key,
                "entry_id": p.entry_id,
                "title": p.title,
                "abstract": p.abstract,
                "source": p.source,
                "added_at": now,
            }
            for p in added
        ],
    )
    return added, over


def library_of(session: Session, subscriber_id: int) -> list[LibraryPaper]:
    """The subscriber's library, oldest first; a paper matched to an entry has that
    entry's title where the export gave none."""
    query = (
        select(LibraryPaperRow, Entry.title)
        .outerjoin(Entry, Entry.id == LibraryPaperRow.entry_id)
        .where(LibraryPaperRow.subscriber_id == subscriber_id)
        .order_by(LibraryPaperRow.id)
    )
    return [
        LibraryPaper(
            row.key,
            row.title or entry_title or "",
            row.abstract,
            row.key.removeprefix("arxiv:") if row.key.startswith("arxiv:") else None,
            row.key.removeprefix("doi:") if row.key.startswith("doi:") else None,
            row.entry_id,
            row.source,
        )
        for row, entry_title in session.execute(query)
    ]


def remove_papers(session: Session, subscriber_id: int, keys: Iterable[str]) -> int:
    """Remove the papers with these keys; how many there were."""
    removed = 0
    for part in chunks(sorted(set(keys))):
        result = session.execute(
            delete(LibraryPaperRow).where(LibraryPaperRow.subscriber_id == subscriber_id, LibraryPaperRow.key.in_(part))
        )
        removed += result.rowcount  # type: ignore[attr-defined]
    return removed
