"""Store: what a store knows of itself (``store_facts``), one value per name.

SQL only.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.store.bulk import insert_ignoring_conflicts
from bot.store.schema import StoreFact

RETAGGED_AT = "tags_retagged_at"  # when every entry's rule tags were last made again
RANKER_FAILURE_FACT = "ranker_last_failure"  # when the outside ranker last failed a pass, and why
EMBEDDING_FAILURE_FACT = "embedding_last_failure"  # when an embedding pass last had requests fail, and how
TLDR_FAILURE_FACT = "tldr_last_failure"  # when a TL;DR pass last had requests fail, and how many of which kind
MODEL_PAUSE_FACT = "llm_paused_until"  # until when the model asked for no requests (a 429), and its base URL


def fact(session: Session, name: str) -> str | None:
    return session.scalar(select(StoreFact.value).where(StoreFact.name == name))


def set_fact(session: Session, name: str, value: str) -> None:
    """Record *value* under *name*, replacing what was there."""
    row = session.get(StoreFact, name)
    if row is None:
        insert_ignoring_conflicts(session, StoreFact.__table__, [{"name": name, "value": value}])
    else:
        row.value = value
