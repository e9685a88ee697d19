"""Files shipped with digestbot: the templates, the default tag rules and the example
configuration.  From a wheel they are package data (``bot/shipped_files/``, put
there by setup.py); from a source checkout they are its ``templates/`` and
``config/`` folders.  Only finds paths; never reads or writes the files."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

TEMPLATES = "templates"
TAG_RULES = "config/tags.toml"
EXAMPLE_CONFIG = "config/digestbot.toml"
EXAMPLE_SUBSCRIBERS = "config/subscribers.example.csv"


def shipped(relative: str) -> Path:
    """The shipped file or folder *relative* (e.g. ``"config/tags.toml"``)."""
    package = Path(str(files("bot")))
    installed = package / "shipped_files" / relative
    if installed.exists():
        return installed
    return package.parent / relative
