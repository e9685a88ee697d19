"""Language-model stage: the pause a model asked for (a 429's ``Retry-After``), kept in
the store so that it outlives the pass that got it: every pass, of every process, of
TL;DRs and of embeddings alike, makes its call with what is left of it, and keeps what
its call was asked.  Never sends a request itself.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.config.services import LlmConfig
from bot.llm.client import LlmCall
from bot.store.engine import transaction
from bot.store.tldrs import model_paused_until, set_model_paused_until


def paused_call(factory: sessionmaker[Session], llm: LlmConfig, now: datetime) -> LlmCall:
    """A call to ``[llm]``'s model that sends nothing before the pause it last asked for ends."""
    with factory() as session:
        until = model_paused_until(session, llm.base_url)
    left = (until - now).total_seconds() if until is not None else 0.0
    return LlmCall(llm, api_key=llm.resolved_api_key().get_secret_value(), paused_seconds=max(0.0, left))


def keep_pause(factory: sessionmaker[Session], llm: LlmConfig, call: LlmCall, now: datetime) -> None:
    """Keep the pause *call* was asked for (counted from *now*, the pass's start), if it
    ends later than the one kept."""
    left = call.pause_left()
    if left <= 0:
        return
    until = now + timedelta(seconds=left)
    with transaction(factory) as session:
        kept = model_paused_until(session, llm.base_url)
        if kept is None or kept < until:
            set_model_paused_until(session, llm.base_url, until)
