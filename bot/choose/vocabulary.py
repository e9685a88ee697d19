"""Choose stage: the tags a filter names that nothing carries (a typo such as
``gpuu``), with the closest tags that exist, so input can be warned about.

Pure: given a parsed filter and the known tag names.  Never reads the store and
never rejects a filter: a tag may be named before the first entry carries it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bot.choose.filter_terms import Atom, Expr, Tag, atoms, to_text


@dataclass(frozen=True, slots=True)
class UnknownTag:
    name: str
    closest: tuple[str, ...]  # known tags that look like it, nearest first


def unknown_tags(expr: Expr, known: Iterable[str]) -> tuple[UnknownTag, ...]:
    """Each tag of *expr* that is not in *known* (compared case-folded), by name."""
    names = {name.casefold() for name in known}
    missing = sorted(atom.name for atom in atoms(expr) if isinstance(atom, Tag) and atom.name not in names)
    return tuple(UnknownTag(name, tuple(difflib.get_close_matches(name, names, n=3, cutoff=0.6))) for name in missing)


def unknown_tags_note(unknown: Iterable[UnknownTag]) -> str:
    """One line for a person, or "" when every tag is known."""
    parts = []
    for tag in unknown:
        hint = f" (did you mean {' or '.join(tag.closest)}?)" if tag.closest else ""
        parts.append(f"'{tag.name}'{hint}")
    if not parts:
        return ""
    if len(parts) == 1:
        return f"no entry has the tag {parts[0]} and no tag rule makes it, so it matches nothing for now"
    return f"no entry has the tags {', '.join(parts)} and no tag rule makes them, so they match nothing for now"


def idle_atoms_note(idle: Sequence[Atom], unknown: Iterable[UnknownTag]) -> str:
    """``tags test``'s line on the atoms that match no stored entry, with the closest
    known tag for each tag nothing carries."""
    closest = {tag.name: tag.closest for tag in unknown}
    shown = []
    for atom in idle:
        hint = closest.get(atom.name) if isinstance(atom, Tag) else None
        shown.append(to_text(atom) + (f" (did you mean {' or '.join(hint)}?)" if hint else ""))
    return f"matched no entry on its own: {', '.join(shown)}"
