"""Library papers (``bot.taste.library``): SQL only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.orm import Session

from bot.domain import LibraryPaper
from bot.domain.identity import normalize_title, title_hash, title_key
from bot.store.bulk import among, chunks
from bot.store.entries import entries_matching
from bot.store.row_shapes import RowShape
from bot.store.schema import Entry
from bot.store.taste_tables import LibraryPaperRow

_MATCHED_BY = ("key", "arxiv_id", "doi", "title_norm")  # in this order of precedence


# Its ids are read from its key; its title is the entry's where the export gave none.
PAPER = RowShape(LibraryPaper, computed=("title", "arxiv_id", "doi"))


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
    return {name: {getattr(row, name): row.id for row in rows if getattr(row, name)} for name in _MATCHED_BY}


def add_papers(
    session: Session, subscriber_id: int, papers: Sequence[LibraryPaper], now: datetime, *, most: int | None = None
) -> tuple[list[LibraryPaper], int]:
    """Add the papers the subscriber's library does not hold yet, in order, until it
    holds *most*; the ones added, with the stored entry each one is, and how many new
    ones did not fit."""
    mine = LibraryPaperRow.subscriber_id == subscriber_id
    held: set[str] = set()
    for part in chunks(sorted({p.key for p in papers})):  # only these keys: a sync of ten adds to 100,000
        held.update(session.scalars(select(LibraryPaperRow.key).where(mine, LibraryPaperRow.key.in_(part))))
    new = [p for p in papers if p.key not in held]
    holds = session.scalar(select(func.count()).select_from(LibraryPaperRow).where(mine)) if most is not None else 0
    room = len(new) if most is None else max(0, most - (holds or 0))
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
                "title_key": _title_key_of(p.title),
            }
            for p in added
        ],
    )
    return added, over


def _title_key_of(title: str) -> str | None:
    norm = normalize_title(title)
    return title_key(norm) if norm else None


Arrival = tuple[int, str, str | None, str | None, str]  # entry id, key, arXiv id, DOI, normalized title


def match_arrivals(session: Session, arrivals: Sequence[Arrival]) -> int:
    """Library papers still waiting for their entry that one of these papers is (by key,
    arXiv id or DOI, else by title when no id says otherwise), matched to it; how many."""
    waiting = select(LibraryPaperRow.id).where(LibraryPaperRow.entry_id.is_(None)).limit(1)
    if not arrivals or session.scalar(waiting) is None:
        return 0  # the common case: one look-up in an index of the papers waiting
    by_key, by_title = _arrivals_by(arrivals)
    found: dict[int, int] = {}
    row = LibraryPaperRow
    for part in chunks(sorted(by_title)):
        query = select(row.id, row.key, row.title_key).where(row.entry_id.is_(None), row.title_key.in_(part))
        for row_id, key, hashed in session.execute(query):
            arrival = by_title[hashed or ""]
            if not _ids_differ(key, arrival):
                found[row_id] = arrival[0]
    for part in chunks(sorted(by_key)):  # an id match wins over a title match
        query_keys = select(row.id, row.key).where(row.entry_id.is_(None), row.key.in_(part))
        found.update((row_id, by_key[key][0]) for row_id, key in session.execute(query_keys))
    table = LibraryPaperRow.__table__
    if found:
        session.connection().execute(
            update(table).where(table.c.id == bindparam("row")).values(entry_id=bindparam("eid")),
            [{"row": row_id, "eid": entry_id} for row_id, entry_id in sorted(found.items())],
        )
    return len(found)


def _arrivals_by(arrivals: Sequence[Arrival]) -> tuple[dict[str, Arrival], dict[str, Arrival]]:
    """Each arrival by the library keys it answers to (its key, ``arxiv:``, ``doi:``, its
    title's key), and by its title's key alone."""
    by_key: dict[str, Arrival] = {}
    by_title: dict[str, Arrival] = {}
    for arrival in arrivals:
        _, key, arxiv_id, doi, norm = arrival
        named = norm and title_key(norm)
        for value in (key, arxiv_id and f"arxiv:{arxiv_id}", doi and f"doi:{doi}", named):
            if value:
                by_key.setdefault(value, arrival)
        if named:
            by_title.setdefault(named, arrival)
    return by_key, by_title


def _ids_differ(key: str, arrival: Arrival) -> bool:
    """A paper the export named by one arXiv id or DOI is not an entry with another."""
    _, _, arxiv_id, doi, _ = arrival
    if key.startswith("arxiv:") and arxiv_id:
        return key != f"arxiv:{arxiv_id}"
    if key.startswith("doi:") and doi:
        return key != f"doi:{doi}"
    return False


def keepers_of(
    session: Session, entry_ids: Sequence[int], subscriber_ids: Sequence[int]
) -> list[tuple[int, int, datetime, datetime | None]]:
    """(subscriber, entry, added at, last told at) of the library papers that are these
    entries, kept by these subscribers: the few entries with news first, by index."""
    if not entry_ids or not subscriber_ids:
        return []
    people = set(subscriber_ids)
    low, high = min(people), max(people)
    table = LibraryPaperRow.__table__
    found = []
    for part in chunks(sorted(set(entry_ids))):
        query = select(table.c.subscriber_id, table.c.entry_id, table.c.added_at, table.c.told_at).where(
            table.c.entry_id.in_(part), table.c.subscriber_id.between(low, high)
        )
        found += [(sid, eid, added, told) for sid, eid, added, told in session.execute(query) if sid in people]
    return found


def any_matched(session: Session) -> bool:
    """Whether any reader keeps a paper the store holds (else there is no library news)."""
    query = select(LibraryPaperRow.id).where(LibraryPaperRow.entry_id.is_not(None)).limit(1)
    return session.scalar(query) is not None


def note_told(session: Session, told: Sequence[tuple[int, int]], now: datetime) -> None:
    """Each (subscriber, entry) of *told*: that reader was told the news of that library paper now."""
    if not told:
        return
    table = LibraryPaperRow.__table__
    session.connection().execute(
        update(table)
        .where(table.c.subscriber_id == bindparam("sid"), table.c.entry_id == bindparam("eid"))
        .values(told_at=now),
        [{"sid": sid, "eid": eid} for sid, eid in sorted(set(told))],
    )


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
        PAPER.of(
            row,
            title=row.title or entry_title or "",
            arxiv_id=row.key.removeprefix("arxiv:") if row.key.startswith("arxiv:") else None,
            doi=row.key.removeprefix("doi:") if row.key.startswith("doi:") else None,
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


def newest_papers_of(session: Session, subscriber_ids: Sequence[int], most: int) -> dict[int, list[LibraryPaper]]:
    """Each subscriber's newest *most* library papers (title and abstract), newest
    first; a subscriber without any is not in the result."""
    found: dict[int, list[LibraryPaper]] = {}
    if most <= 0:
        return found
    for part in chunks(subscriber_ids):
        newest = (
            select(
                LibraryPaperRow.subscriber_id,
                LibraryPaperRow.key,
                func.coalesce(func.nullif(LibraryPaperRow.title, ""), Entry.title, "").label("title"),
                LibraryPaperRow.abstract,
                func.row_number()
                .over(partition_by=LibraryPaperRow.subscriber_id, order_by=LibraryPaperRow.id.desc())
                .label("rank"),
            )
            .outerjoin(Entry, Entry.id == LibraryPaperRow.entry_id)
            .where(among(session, LibraryPaperRow.subscriber_id, part))
            .subquery()
        )
        query = select(newest.c.subscriber_id, newest.c.key, newest.c.title, newest.c.abstract).where(
            newest.c.rank <= most
        )
        for subscriber_id, key, title, abstract in session.execute(query.order_by(newest.c.rank)):
            found.setdefault(subscriber_id, []).append(LibraryPaper(key, title, abstract or ""))
    return found
