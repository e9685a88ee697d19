"""Subscriber stage: the yes/no settings a subscriber has beyond their address, filter,
zone, hour, backfill and cadence.  One entry here is all that the CLI (``subscribers add``
and ``edit`` get ``--FLAG/--no-FLAG``; ``show`` and ``--json`` list it), CSV import and
export (a column by the setting's name) and the manage page (a button that turns it on or
off) need; the field and the column by the same name are in ``bot.domain``
(``SUBSCRIBER_SETTINGS``) and ``bot.store.schema``.  CONTRIBUTING.md, "Add a subscriber
setting", has the recipe.  Pure; never reads or writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.domain import SUBSCRIBER_SETTINGS


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # the field of Subscriber and SubscriberFields, the store's column, the CSV column
    flag: str  # the CLI's --FLAG/--no-FLAG and the manage page's FLAG_on / FLAG_off actions
    help: str  # the CLI's help for the flag
    default: bool  # a new subscriber's value (the column's server default says the same)
    turn_on: str  # the manage page's button while it is off ...
    turned_on: str  # ... and what the page says once it is on
    turn_off: str
    turned_off: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        name="send_updates",
        flag="updates",
        help=(
            "List entries revised since they were sent, and news of the papers in the library "
            "('Updated since we sent it', 'Your library'; default on)."
        ),
        default=True,
        turn_on="List revised entries and library news again",
        turned_on="Revised entries you were sent, and news of your library, will be listed in your digests.",
        turn_off="Stop listing revised entries and library news",
        turned_off="Revised entries and news of your library will no longer be listed in your digests.",
    ),
)
if tuple(s.name for s in SETTINGS) != SUBSCRIBER_SETTINGS:  # a setting added in one place only
    raise RuntimeError("bot.domain.SUBSCRIBER_SETTINGS must list the settings of bot.subscribers.settings, in order")

_YES = {"yes", "true", "on", "1"}
_NO = {"no", "false", "off", "0"}


class SettingError(ValueError):
    """A value a setting cannot take: the message names the setting."""


def parse(setting: Setting, text: str) -> bool:
    """A CSV cell's value: yes/no (or true/false, on/off, 1/0), any case."""
    word = text.strip().casefold()
    if word in _YES:
        return True
    if word in _NO:
        return False
    raise SettingError(f"{setting.name}: {text!r} is not yes or no")


def shown(value: bool) -> str:
    """The value as CSV export and ``subscribers show`` write it."""
    return "yes" if value else "no"


def by_action(action: str) -> tuple[Setting, bool] | None:
    """The setting and value a manage page action (``FLAG_on``, ``FLAG_off``) sets."""
    for setting in SETTINGS:
        if action in (f"{setting.flag}_on", f"{setting.flag}_off"):
            return setting, action.endswith("_on")
    return None
