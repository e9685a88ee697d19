"""Mail stage: a digest entry's "why" line in the reader's words.

The planner pins each entry's reasons as an operator checks them ("gpu: tag (header;
rule: title, summary)", "Spiking · snn: tag (header); also in Serving", "close to:
'…' from your library"): ``preview`` and ``tags test`` print them as they are, and the
digest's contents are grouped by them.  What a reader sees is made from that line
here, at render time, so a digest sent before reads the same way: "Matches your
interest Spiking: its source lists it under snn; also in Serving".  Pure: never reads
or writes anything.
"""

from __future__ import annotations

import re

from bot.domain.text import one_line

EVERY_PAPER = "You asked for every paper"
# The pinned line's parts (bot.choose.matching, bot.plan.sections, bot.taste.ranking).
_SECTION = re.compile(r"^(?P<section>[^·;:\"]+) · ")
_CLOSE_TO = re.compile(r"(?:^|; )close to: '(?P<title>.*)' from your library$")
_ALSO_IN = re.compile(r"; also in (?P<others>[^;]*)$")
_REASON = re.compile(r'("(?:[^"\\]|\\.)*"|[^:;"]+): ((?:tag \([^)]*\))|[^;]*)')


def library_paper(why: str) -> str | None:
    """The title of the reader's library paper the pinned line *why* says its entry is
    close to, or None when it names none."""
    close = _CLOSE_TO.search(why.strip())
    return None if close is None else close.group("title")


def reader_why(why: str, section: str | None = None, *, summary_cut: bool = False) -> str:
    """*why*, the pinned line of an entry (shown under *section*, one of the reader's
    interests, which the line names too), as the reader reads it: one line.  With
    *summary_cut* (the digest shows the summary's start only), a word the summary holds
    is said to be in its full abstract: it may be in the part not shown."""
    line = why.strip()
    named = _SECTION.match(line)
    if named is not None:
        section = section or named.group("section")
        line = line[named.end() :]
    close = _CLOSE_TO.search(line)
    if close is not None:
        line = line[: close.start()]
    also = _ALSO_IN.search(line)
    if also is not None:
        line = line[: also.start()]
    reasons = _joined([_reason(atom.strip(), where.strip(), summary_cut) for atom, where in _REASON.findall(line)])
    if line.strip() == "matches everything" or (not reasons and close is not None):
        said = EVERY_PAPER if close is None else ""
    elif reasons:
        head = f"Matches your interest {section}" if section else "Matches your filter"
        said = f"{head}: {'; '.join(dict.fromkeys(reasons))}"
    else:
        said = line.strip()
    if also is not None:
        said += f"; also in {also.group('others')}"
    if close is not None:
        note = f"Close to '{close.group('title')}' in your library"
        said = f"{said}. {note}" if said else note
    # A library paper's title, or a line pinned by hand, may hold any line break.
    return one_line(said)


def _joined(reasons: list[tuple[str, str]]) -> list[str]:
    """Reasons that say the same of several atoms, said once: "its summary mentions gpu
    and llm"."""
    atoms: dict[str, list[str]] = {}
    for said, atom in reasons:
        named = atoms.setdefault(said, [])
        if atom not in named:
            named.append(atom)
    return [_filled(said, names) for said, names in atoms.items()]


# Where a reason's atoms go, and its verb's number ("is" or "are"): characters no filter
# or pinned line holds (bot.domain.text.NOT_TYPED).
_ATOMS, _IS = "\x00", "\x01"


def _filled(said: str, names: list[str]) -> str:
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return said.replace(_ATOMS, listed).replace(_IS, "is" if len(names) == 1 else "are")


def _reason(atom: str, where: str, summary_cut: bool = False) -> tuple[str, str]:
    """One reason in words, with ``_ATOMS`` where its atom goes (the same reason for
    several atoms is said once), and the atom."""
    if atom == "author":
        return f"by {where}, whom you follow", atom
    if atom == "liked":
        return "close to what you keep and like", atom
    if where.startswith("phrase in "):
        return f"{_ATOMS} {_IS} in its {where.removeprefix('phrase in ')}", atom
    if where.startswith("tag (") and where.endswith(")"):
        return _tag_reason(where[5:-1], summary_cut), atom
    return f"{atom}: {where}", atom


def _tag_reason(inside: str, summary_cut: bool) -> str:
    """A tag's reason, from what its pinned "tag (…)" holds: where its rule found it."""
    parts = [part.strip() for part in inside.split(";")]
    fields = next((p.removeprefix("rule:").strip() for p in parts if p.startswith("rule:")), "")
    places = [f.strip() for f in fields.split(",") if f.strip() in ("title", "summary")]
    if summary_cut:  # the reader sees the summary's start only: the word may be further on
        places = ["full abstract" if place == "summary" else place for place in places]
    if places:
        return f"its {' and '.join(places)} {'mention' if len(places) > 1 else 'mentions'} {_ATOMS}"
    if fields:
        return f"it is about {_ATOMS}"
    return f"its source lists it under {_ATOMS}"
