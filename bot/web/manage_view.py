"""Subscriber endpoint: what the manage page (``bot.web.manage``) shows.

The digest choices as the form shows them (ticked tags or the advanced filter,
cadence, time zone, send hour), filled from the subscriber or, after an error,
from what they sent.  Pure: ``bot.web.manage`` reads the store and decides what a
POST does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bot.choose.filters import shown_filter
from bot.config.services import LlmConfig
from bot.domain import Subscriber
from bot.subscribers.settings import SETTINGS
from bot.web.choices import ChoicesForm, hour_or, menu, ticked_tags


@dataclass(frozen=True, slots=True)
class PageNotice:
    """What the manage page says above its form, and the status it answers with."""

    status_code: int = 200
    message: str | None = None
    error: str | None = None
    warning: str | None = None


def manage_choices(
    subscriber: Subscriber, tags: list[tuple[str, int]], values: Mapping[str, list[str]] | None = None
) -> ChoicesForm:
    """*subscriber*'s digest choices as their page's form shows them; *values* (a
    submitted form that failed) win over the stored ones, so the person sees what they
    sent."""
    if values is None:
        found = ticked_tags(subscriber.filter)
        ticked, advanced = (found, "") if found is not None else ([], shown_filter(subscriber.filter))
        return ChoicesForm(menu(tags, ticked), advanced, subscriber.cadence, subscriber.timezone, subscriber.send_hour)
    return ChoicesForm(
        menu(tags, values.get("tag", [])),
        (values.get("filter") or [""])[0],
        (values.get("cadence") or [subscriber.cadence])[0],
        (values.get("timezone") or [subscriber.timezone])[0],
        hour_or((values.get("send_hour") or [""])[0], subscriber.send_hour),
    )


def toggles(subscriber: Subscriber) -> list[tuple[str, str]]:
    """Each yes/no setting's button: the action it posts and its words."""
    return [
        (f"{s.flag}_off", s.turn_off) if getattr(subscriber, s.name) else (f"{s.flag}_on", s.turn_on) for s in SETTINGS
    ]


def language_choices(subscriber: Subscriber, llm: LlmConfig) -> list[tuple[str, bool]]:
    """The TL;DR languages a reader may choose, each with whether it is theirs; none when
    no model writes TL;DRs or only one language is offered."""
    shown = llm.tldr_language(subscriber.language)
    if shown is None or len(llm.languages) < 2:
        return []
    return [(language, language == shown) for language in llm.languages]
