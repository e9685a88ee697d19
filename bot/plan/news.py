"""Plan stage: the news a digest being planned carries beside its entries: the entries
its subscriber was sent and that were revised since (``bot.plan.revisions``), and,
under "Your library", the papers they keep in their library that got a new arXiv
version or a code or model link since they added them or were last told, whether or
not the bot ever sent them.  ``library_news`` and ``news_line`` are the rules, pure;
``attach_news`` asks the store and pins the answer in the digests.  Never renders or
sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from bot.domain import EntryNews
from bot.domain.links import arxiv_page, code_links, is_model_link
from bot.plan.revisions import HORIZON, revision_updates
from bot.store.entry_reads import entries_with_news
from bot.store.library import any_matched, keepers_of, note_told
from bot.store.revisions import wanting_updates, write_told

# At most this many library papers in one digest; the rest wait for the next.
LIBRARY_PER_DIGEST = 5

Keeper = tuple[int, int, datetime, datetime | None]  # subscriber, entry, added at, last told at


def library_news(keepers: Iterable[Keeper], news: Mapping[int, EntryNews]) -> dict[int, list[tuple[int, datetime]]]:
    """Per subscriber, the papers of their library (*keepers*) to tell them of: those
    revised or given a code or model link after the later of when they added the paper
    and when they were last told of it; (entry, that moment), the oldest news first,
    at most ``LIBRARY_PER_DIGEST``."""
    found: dict[int, list[tuple[datetime, int, datetime]]] = {}
    for subscriber_id, entry_id, added_at, told_at in keepers:
        since = max(added_at, told_at) if told_at is not None else added_at
        item = news[entry_id]
        moments = [m for m in (item.revised_at, item.linked_at) if m is not None and m > since]
        if moments:
            found.setdefault(subscriber_id, []).append((min(moments), entry_id, since))
    return {
        sid: [(entry_id, since) for _, entry_id, since in sorted(items)[:LIBRARY_PER_DIGEST]]
        for sid, items in found.items()
    }


def news_line(item: EntryNews, since: datetime) -> dict[str, Any]:
    """What "Your library" says of a paper: what happened after *since*, and a link to
    its newest code (else model) when that is the news, else to the paper."""
    said = []
    url = arxiv_page(item.arxiv_id) if item.arxiv_id else ""
    if item.revised_at is not None and item.revised_at > since:
        said.append(f"new version: {item.revision_note}" if item.revision_note else "new version")
    models = [u for u in code_links(item.links) if is_model_link(u)]
    code = [u for u in code_links(item.links) if not is_model_link(u)]
    if item.linked_at is not None and item.linked_at > since and (code or models):
        url = (code or models)[-1]  # its code first: the newest repository named
        said.append(" and ".join(["code"] * bool(code) + ["model"] * bool(models)) + " released")
    return {"title": item.title, "note": "; ".join(said) or "updated", "url": url, "library": True}


def attach_news(session: Session, digests: Sequence[tuple[int, int]], now: datetime) -> None:
    """For each (digest id, subscriber id) of digests just planned: the revised entries
    that subscriber was sent and the news of their library, pinned in the digest and
    noted as told.  A paper told as revised is not told again under "Your library"."""
    digest_of = {subscriber_id: digest_id for digest_id, subscriber_id in digests}
    if not digest_of:
        return
    updates, told = revision_updates(session, digest_of, now)
    library, library_told = _library_updates(session, digest_of, now, set(told))
    for digest_id, items in library.items():
        updates.setdefault(digest_id, []).extend(items)
    write_told(session, updates, told, now)
    note_told(session, library_told, now)


def _library_updates(
    session: Session, digest_of: Mapping[int, int], now: datetime, shown: set[tuple[int, int]]
) -> tuple[dict[int, list[dict[str, Any]]], list[tuple[int, int]]]:
    if not any_matched(session):
        return {}, []  # no reader keeps a stored paper: one look-up in a partial index
    news = entries_with_news(session, now - HORIZON)
    if not news:
        return {}, []
    keepers = keepers_of(session, list(news), wanting_updates(session, sorted(digest_of)))
    updates: dict[int, list[dict[str, Any]]] = {}
    told: list[tuple[int, int]] = []
    for subscriber_id, items in library_news(keepers, news).items():
        for entry_id, since in items:
            told.append((subscriber_id, entry_id))
            if (subscriber_id, entry_id) not in shown:
                updates.setdefault(digest_of[subscriber_id], []).append(news_line(news[entry_id], since))
    return updates, told
