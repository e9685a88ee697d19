"""Taste stage, pure: what each of a reader's named interests learns from.

A reader whose filter names several interests (``bot.choose.filters.sections_of``)
has, besides the model of everything they keep and rate, a model per interest with at
least ``MIN_POSITIVES`` positives of its own.  A rating trains the interest its entry
was shown under; a library paper, and a rating whose interest the filter no longer
names, trains each interest whose filter matches it (its title and text, with the tags
the rules give them).  Never reads the store, never trains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.choose.filters import NamedInterest
from bot.choose.matching import FilterInput, matches
from bot.choose.tagging import TagRules, nfkc

MIN_POSITIVES = 2  # library papers and "more like this"; fewer teach nothing a filter does not already say


@dataclass(frozen=True, slots=True)
class Example:
    title: str
    text: str  # what the model learns from
    shown_under: str | None = None  # the interest it was rated under; None: judged by the filters


@dataclass(frozen=True, slots=True)
class Examples:
    """What one model learns from: papers the reader wants, texts they said less of,
    and a sample of the store."""

    positives: list[Example]
    negatives: list[Example]
    sample: list[str] = field(default_factory=list)


def by_interest(sections: Sequence[NamedInterest], rules: TagRules, examples: Examples) -> dict[str, Examples]:
    """The examples of each interest with enough positives of its own, by name."""
    names = {s.name for s in sections}

    def belongs(example: Example, section: NamedInterest) -> bool:
        if example.shown_under in names:
            return example.shown_under == section.name
        return matches(section.expr, _doc(example, rules))

    found: dict[str, Examples] = {}
    for section in sections:
        positives = [e for e in examples.positives if belongs(e, section)]
        if len(positives) >= MIN_POSITIVES:
            negatives = [e for e in examples.negatives if belongs(e, section)]
            found[section.name] = Examples(positives, negatives, examples.sample)
    return found


def _doc(example: Example, rules: TagRules) -> FilterInput:
    title, text = nfkc(example.title), nfkc(example.text)
    tags = rules.match(title, text) if len(rules) else {}
    return FilterInput(tags={name.casefold(): frozenset({"rule"}) for name in tags}, title=title, summary=text)
