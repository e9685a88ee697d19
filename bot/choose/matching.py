"""Select stage: whether a parsed filter (``bot.choose.filters``) matches an entry, and
why: the atoms that matched, where, and a score that orders the matches.  Pure
functions over ``Doc``: never touches the store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from bot.choose.filter_terms import LIKED, And, Author, Everything, Expr, Liked, Not, Or, Phrase, Tag, to_text
from bot.choose.names import fold_name, same_person


@lru_cache(maxsize=4096)
def phrase_pattern(text: str) -> re.Pattern[str]:
    """Case-insensitive, on word boundaries (Unicode-aware); between the phrase's
    words any run of spaces or punctuation matches ("kv cache" finds "KV-cache")."""
    words = [re.escape(w) for w in re.findall(r"[^\W_]+", text)] or [re.escape(text)]
    return re.compile(r"(?<!\w)" + r"[\W_]+".join(words) + r"(?!\w)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class FilterInput:
    """What a filter looks at: the entry's tags (case-folded name -> origins), text and
    authors (as written)."""

    tags: dict[str, frozenset[str]]
    title: str
    summary: str
    authors: tuple[str, ...] = ()
    liked: bool = False  # the subscriber's model scores it above their threshold


def authors_named(expr: Author, doc: FilterInput) -> list[str]:
    """The entry's authors that *expr* names, as written.  Names are folded here, when
    a filter asks, not for every entry a planning pass weighs."""
    wanted = fold_name(expr.name)
    return [name for name in doc.authors if same_person(wanted, fold_name(name))]


@dataclass(frozen=True, slots=True)
class Hit:
    atom: str  # as printed in the filter: a tag name or a quoted phrase
    where: str  # "tag (header)", "tag (rule: title)", "phrase in title", ...
    in_title: bool


@dataclass(frozen=True, slots=True)
class Explanation:
    matched: bool
    hits: tuple[Hit, ...]  # atoms found in the entry (also under a satisfied "not": none)
    score: int

    def why(self) -> str:
        return "; ".join(f"{h.atom}: {h.where}" for h in self.hits) if self.hits else "matches everything"


# Relevance: a title hit outweighs a summary hit; a source's own tag (header or
# category) sits between; a followed author counts as much as a title hit; more
# matched atoms add up.
WEIGHT_TITLE, WEIGHT_SOURCE_TAG, WEIGHT_SUMMARY, WEIGHT_AUTHOR = 3, 2, 1, 3
AUTHOR_HIT = "author"  # a followed author's hit: "author: John Smith" in the why line


def matches(expr: Expr, doc: FilterInput) -> bool:
    if isinstance(expr, Everything):
        return True
    if isinstance(expr, Tag):
        return expr.name in doc.tags
    if isinstance(expr, Phrase):
        pattern = phrase_pattern(expr.text)
        return bool(pattern.search(doc.title) or pattern.search(doc.summary))
    if isinstance(expr, Author):
        return bool(authors_named(expr, doc))
    if isinstance(expr, Liked):
        return doc.liked
    if isinstance(expr, Not):
        return not matches(expr.expr, doc)
    if isinstance(expr, And):
        return all(matches(i, doc) for i in expr.items)
    return any(matches(i, doc) for i in expr.items)


def _positive_hits(
    expr: Expr, doc: FilterInput, rule_fields: dict[str, tuple[str, ...]], negated: bool = False
) -> list[Hit]:
    if isinstance(expr, Not):
        return _positive_hits(expr.expr, doc, rule_fields, not negated)
    if isinstance(expr, (And, Or)):
        return [h for i in expr.items for h in _positive_hits(i, doc, rule_fields, negated)]
    return [] if negated else _atom_hits(expr, doc, rule_fields)


def _atom_hits(expr: Expr, doc: FilterInput, rule_fields: dict[str, tuple[str, ...]]) -> list[Hit]:
    if isinstance(expr, Tag) and expr.name in doc.tags:
        return [_tag_hit(expr.name, doc.tags[expr.name], rule_fields.get(expr.name, ()))]
    if isinstance(expr, Phrase):
        pattern = phrase_pattern(expr.text)
        places = [name for name, text in (("title", doc.title), ("summary", doc.summary)) if pattern.search(text)]
        if places:
            return [Hit(to_text(expr), "phrase in " + " and ".join(places), "title" in places)]
    if isinstance(expr, Author):
        return [Hit(AUTHOR_HIT, name, False) for name in authors_named(expr, doc)]
    if isinstance(expr, Liked) and doc.liked:
        return [Hit(LIKED, "your model's pick", False)]
    return []


# A pass weighs hundreds of filters on each entry, and most name the same few tags.
@lru_cache(maxsize=65_536)
def _tag_hit(name: str, origins: frozenset[str], fields: tuple[str, ...]) -> Hit:
    """A tag found on the entry, saying where each of its origins put it."""
    parts = sorted(o for o in origins if o != "rule")
    if "rule" in origins:
        parts.append("rule: " + (", ".join(fields) if fields else "matched"))
    return Hit(name, "tag (" + "; ".join(parts) + ")", "title" in fields)


def explain(
    expr: Expr, doc: FilterInput, rule_fields: dict[str, tuple[str, ...]] | None = None, *, matched: bool | None = None
) -> Explanation:
    """Whether *doc* matches, which atoms were found where, and its relevance score.

    *rule_fields* says, per rule tag, in which fields its rule matched; *matched*, when
    the caller has just asked ``matches``, its answer (not worked out again)."""
    rule_fields = rule_fields or {}
    if matched is None:
        matched = matches(expr, doc)
    hits: dict[tuple[str, str], Hit] = {}
    for hit in _positive_hits(expr, doc, rule_fields):
        hits.setdefault((hit.atom, hit.where if hit.atom == AUTHOR_HIT else ""), hit)
    score = 0
    for hit in hits.values():
        if hit.atom == LIKED:
            continue  # the model's taste score is weighed by the blend (bot.taste.ranking)
        if hit.atom == AUTHOR_HIT:
            score += WEIGHT_AUTHOR
        elif hit.in_title:
            score += WEIGHT_TITLE
        elif hit.where.startswith("tag (") and ("header" in hit.where or "category" in hit.where):
            score += WEIGHT_SOURCE_TAG
        else:
            score += WEIGHT_SUMMARY
    return Explanation(matched, tuple(hits.values()), score if matched else 0)
