"""Plan stage: the Message-ID a digest gets when it is planned.  Pure; never reads or
writes anything."""

from __future__ import annotations

import hashlib
from datetime import date

from bot.config import SenderConfig
from bot.domain.text import domain_of


def message_id_for(digest_id: int, subscriber_id: int, local_date: date, kind: str, sender: SenderConfig) -> str:
    """Deterministic: every attempt of one digest carries the same Message-ID."""
    tag = hashlib.sha256(f"{digest_id}:{subscriber_id}:{local_date}:{kind}".encode()).hexdigest()[:12]
    return f"<digest.{digest_id}.{tag}@{domain_of(sender.from_address)}>"
