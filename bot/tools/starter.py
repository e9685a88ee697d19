"""``digestbot init``: an operator's editable copy of the shipped configuration, tag
rules, example subscribers and templates, in a folder of their choice, with the
(empty) dump folder its configuration names.

Writes only into the folder it is given and never overwrites a file unless told to.
"""

from __future__ import annotations

from pathlib import Path

from bot.files import write_whole
from bot.shipped import EXAMPLE_CONFIG, EXAMPLE_SUBSCRIBERS, TAG_RULES, TEMPLATES, shipped

# The example config leaves these commented out (the shipped copies are the default);
# the starter's config points at the copies written beside it.
_USE_COPIES = (
    ('# templates_dir = "templates"', 'templates_dir = "templates"'),
    ('# tags_file = "config/tags.toml"', 'tags_file = "config/tags.toml"'),
    ('dump_dir = "seeds"', 'dump_dir = "dumps"'),  # the shipped demo reads seeds/; a site starts empty
)
# Folders the starter's config names, made empty beside it.
STARTER_FOLDERS = ("dumps",)


class StarterExists(Exception):
    """The folder already holds files ``init`` would write."""


def starter_files() -> dict[str, Path]:
    """Each file to write, by its path inside the starter folder, and its shipped source."""
    files = {name: shipped(name) for name in (EXAMPLE_CONFIG, TAG_RULES, EXAMPLE_SUBSCRIBERS)}
    templates = shipped(TEMPLATES)
    for source in sorted(templates.rglob("*")):
        if source.is_file() and "__pycache__" not in source.parts:
            files[f"{TEMPLATES}/{source.relative_to(templates).as_posix()}"] = source
    return files


def write_starter(folder: Path, *, overwrite: bool = False) -> list[Path]:
    """Write the starter into *folder*; the paths written.  Raises StarterExists, naming
    the first file that is already there, before writing anything, unless *overwrite*."""
    files = starter_files()
    if not overwrite:
        taken = [folder / name for name in files if (folder / name).exists()]
        if taken:
            raise StarterExists(f"{taken[0]} already exists; nothing written (--force overwrites)")
    written = []
    for name, source in files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if name == EXAMPLE_CONFIG:
            text = source.read_text(encoding="utf-8")
            for shipped_line, copy_line in _USE_COPIES:
                text = text.replace(shipped_line, copy_line, 1)
            write_whole(target, text.encode("utf-8"))
        else:
            write_whole(target, source.read_bytes())
        written.append(target)
    for name in STARTER_FOLDERS:
        (folder / name).mkdir(parents=True, exist_ok=True)
    return written
