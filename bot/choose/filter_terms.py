"""Subscriber filter language, the expression tree (select stage): its nodes, how they
are built (``make_*``), printed back (``to_text``: text that parses to the same tree)
and which atoms a filter names.  ``bot.choose.filters`` parses; ``bot.choose.matching``
evaluates.  Pure functions: never touches the store.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from bot.choose.names import fold_name


@dataclass(frozen=True, slots=True)
class Everything:
    pass


@dataclass(frozen=True, slots=True)
class Tag:
    name: str  # case-folded


@dataclass(frozen=True, slots=True)
class Phrase:
    text: str  # whitespace collapsed, case kept for display


@dataclass(frozen=True, slots=True)
class Author:
    name: str  # whitespace collapsed, as written (display); matched through fold_name


@dataclass(frozen=True, slots=True)
class Liked:
    """Scored above the subscriber's threshold by their model (a word of the language:
    no tag can be called "liked")."""


@dataclass(frozen=True, slots=True)
class Not:
    expr: Expr


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Expr, ...]


Expr = Everything | Tag | Phrase | Author | Liked | Not | And | Or
Atom = Tag | Phrase | Author | Liked
LIKED = "liked"


def make_and(*items: Expr) -> Expr:
    flat: list[Expr] = []
    for item in items:
        flat.extend(item.items if isinstance(item, And) else (item,))
    return flat[0] if len(flat) == 1 else And(tuple(flat))


def make_or(*items: Expr) -> Expr:
    flat: list[Expr] = []
    for item in items:
        flat.extend(item.items if isinstance(item, Or) else (item,))
    return flat[0] if len(flat) == 1 else Or(tuple(flat))


def make_tag(name: str) -> Tag:
    return Tag(name.casefold())


def make_phrase(text: str) -> Phrase:
    return Phrase(" ".join(unicodedata.normalize("NFKC", text).split()))


def make_author(name: str) -> Author:
    text = " ".join(unicodedata.normalize("NFKC", name).split())
    if not fold_name(text):
        raise ValueError("author: needs a name with letters or digits")
    return Author(text)


def to_text(expr: Expr) -> str:
    """The canonical text of *expr*; ``parse_filter(to_text(e)) == e``."""
    if isinstance(expr, Everything):
        return "*"
    if isinstance(expr, Tag):
        return expr.name
    if isinstance(expr, Phrase):
        return _quoted(expr.text)
    if isinstance(expr, Author):
        return "author:" + _quoted(expr.name)
    if isinstance(expr, Liked):
        return LIKED
    if isinstance(expr, Not):
        inner = to_text(expr.expr)
        return f"not ({inner})" if isinstance(expr.expr, (And, Or)) else f"not {inner}"
    if isinstance(expr, And):
        return " and ".join(f"({to_text(i)})" if isinstance(i, Or) else to_text(i) for i in expr.items)
    # "and" binds tighter, so "a and b or c" needs none, but a person reads it more
    # easily with them, and someone who typed them expects to see them again.
    return " or ".join(f"({to_text(i)})" if isinstance(i, And) else to_text(i) for i in expr.items)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def atoms(expr: Expr) -> set[Atom]:
    if isinstance(expr, (Tag, Phrase, Author, Liked)):
        return {expr}
    if isinstance(expr, Not):
        return atoms(expr.expr)
    if isinstance(expr, (And, Or)):
        return set().union(*(atoms(i) for i in expr.items))
    return set()
