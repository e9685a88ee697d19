"""Subscriber filter language: parse and print (select stage; ``bot.choose.matching``
evaluates and explains).

    gpu and (llm or moe) and not snn
    "sparse attention" or serving
    *
    Spiking hardware: snn or neuromorphic; Serving: llm and serving

The last names several interests (``sections_of``): it matches what any of them
matches, and a digest shows each entry under one of them (``bot.plan.sections``).

Atoms are tags (case-insensitive, any origin), quoted phrases (matched in the
title or summary, case-insensitively and on word boundaries), authors
(``author:"J. Smith"``, matched on the entry's author list as ``same_person``
says; a repository's owner is its author), ``liked`` (the entries the subscriber's
own model scores above their threshold, ``bot.taste``; the caller says which those
are, in ``matching.FilterInput.liked``) and ``*`` (everything).  ``not``
binds tightest, then ``and``, then ``or``; there is no implicit ``and``.
Parsing uses lark; a stored filter is always one that parsed, and printing
a parsed filter gives text that parses back to it.
Pure functions: never touches the store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from bot.choose.filter_terms import (
    Everything,
    Expr,
    Liked,
    Not,
    atoms,
    make_and,
    make_author,
    make_or,
    make_phrase,
    make_tag,
    to_text,
)
from bot.domain.text import NOT_TYPED

if TYPE_CHECKING:
    from lark import Lark, Token, Transformer
    from lark.exceptions import UnexpectedInput

MAX_FILTER_LENGTH = 2000
# Parsing, canonicalizing and matching recurse once per level: "not " x 499 + "gpu"
# fits in 2,000 characters but not in Python's stack.  No real filter nests this deep.
MAX_FILTER_DEPTH = 32
_DEPTH_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[()]|[^\s()"]+')

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*
?and_expr: not_expr (_AND not_expr)*
?not_expr: _NOT not_expr -> negate
         | atom
?atom: AUTHOR -> author
     | LIKED -> liked
     | TAG -> tag
     | PHRASE -> phrase
     | "*" -> everything
     | "(" or_expr ")"
_OR.2: /or(?![^\s()"*])/i
_AND.2: /and(?![^\s()"*])/i
_NOT.2: /not(?![^\s()"*])/i
AUTHOR.3: /author:"(?:[^"\\]|\\.)*"/i
LIKED.3: /liked(?![^\s()"*])/i
TAG: /[^\s()"*]+/
PHRASE: /"(?:[^"\\]|\\.)*"/
%ignore /\s+/
"""


class FilterError(ValueError):
    """An invalid filter; ``position`` is 1-based, ``str()`` one line."""

    def __init__(self, text: str, position: int, message: str) -> None:
        self.text = text
        self.position = position
        self.message = message
        super().__init__(f"filter {text!r}: position {position}: {message}")


# --- parsing and printing -------------------------------------------------------


@lru_cache(maxsize=1)
def _parser() -> tuple[Lark, Transformer[Token, Expr]]:
    """The parser and its tree-to-filter transformer, built on first use: importing lark
    and building the grammar is a tenth of a store command's start, and most commands
    never parse a filter."""
    from lark import Lark, Token, Transformer, v_args

    @v_args(inline=True)
    class ToAst(Transformer[Token, Expr]):
        def tag(self, token: Token) -> Expr:
            return make_tag(str(token))

        def phrase(self, token: Token) -> Expr:
            raw = str(token)[1:-1]
            text = re.sub(r"\\(.)", r"\1", raw)
            if not text.strip():
                raise ValueError("empty phrase")
            return make_phrase(text)

        def author(self, token: Token) -> Expr:
            raw = str(token)[len("author:") + 1 : -1]
            return make_author(re.sub(r"\\(.)", r"\1", raw))

        def liked(self, _token: Token) -> Expr:
            return Liked()

        def everything(self) -> Expr:
            return Everything()

        def negate(self, expr: Expr) -> Expr:
            return Not(expr)

        def and_expr(self, *items: Expr) -> Expr:
            return make_and(*items)

        def or_expr(self, *items: Expr) -> Expr:
            return make_or(*items)

    # The basic (not contextual) lexer: keywords must never lex as tags, even
    # where only an operand could follow ("gpu and or llm" is an error, not a tag "or").
    return Lark(_GRAMMAR, parser="lalr", lexer="basic", maybe_placeholders=False), ToAst()


def _describe(exc: UnexpectedInput) -> str:
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    if isinstance(exc, UnexpectedEOF):
        return "unexpected end of filter (an operand or ')' is missing)"
    if isinstance(exc, UnexpectedToken):
        token = exc.token
        if token.type == "$END":
            return "unexpected end of filter (an operand or ')' is missing)"
        return f"unexpected {str(token)!r}"
    if isinstance(exc, UnexpectedCharacters):
        return f"unexpected character {exc.char!r}"
    return "syntax error"


@lru_cache(maxsize=4096)
def parse_filter(text: str) -> Expr:
    """Parse a filter; raise ``FilterError`` with the 1-based position of the problem.
    A filter of several interests (``sections_of``) matches what any of them matches."""
    found = sections_of(text)
    return make_or(*(s.expr for s in found)) if found else _parse_one(text)


# --- several interests -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NamedInterest:
    """One named interest of a filter: "Serving: llm and serving"."""

    name: str
    expr: Expr

    @property
    def text(self) -> str:
        return to_text(self.expr)


MAX_SECTIONS = 8
MAX_SECTION_NAME = 60
# A name (words of no quotes, parentheses, stars, colons or semicolons, with spaces or
# tabs between them, never another kind of space: a Unicode line break in a name would
# break the line it is shown on), a colon, then a space.  No filter of one interest
# starts so: "author:" takes a quote, and two operands with no operator between them do
# not parse.  Words and the spaces between them never overlap, so it reads in linear time.
_SECTION_HEAD = re.compile(r'[ \t]*([^\s:;"()*]+(?:[ \t]+[^\s:;"()*]+)*)[ \t]*:[ \t]')
_SEGMENTS = re.compile(r'"(?:[^"\\]|\\.)*"?|;|[^";]+')  # a phrase (its ";" stays), ";", the rest


@lru_cache(maxsize=4096)
def sections_of(text: str) -> tuple[NamedInterest, ...]:
    """The named interests of a filter written "Name: filter; Name: filter", in order;
    none for a filter of one interest.  ``FilterError`` names the first problem."""
    if len(text) > MAX_FILTER_LENGTH or not _SECTION_HEAD.match(text):
        return ()  # too long: refused as any filter is
    _check_before_parsing(text)
    found: list[NamedInterest] = []
    for start, segment in _segments(text):
        at = start + len(segment) - len(segment.lstrip()) + 1  # where its name begins
        head = _SECTION_HEAD.match(segment)
        if head is None:
            raise FilterError(text, at, 'each interest starts with its name and a colon ("Serving: llm")')
        name = " ".join(head.group(1).split())
        if len(name) > MAX_SECTION_NAME:
            raise FilterError(text, at, f"an interest's name is longer than {MAX_SECTION_NAME} characters")
        if len(found) == MAX_SECTIONS:
            raise FilterError(text, at, f"more than {MAX_SECTIONS} interests")
        if any(s.name.casefold() == name.casefold() for s in found):
            raise FilterError(text, at, f"two interests are named {name!r}")
        try:
            found.append(NamedInterest(name, _parse_one(segment[head.end() :])))
        except FilterError as exc:
            raise FilterError(text, start + head.end() + exc.position, exc.message) from None
    return tuple(found)


def _segments(text: str) -> list[tuple[int, str]]:
    """The parts of *text* between semicolons outside phrases, with where each starts;
    a blank last part (a trailing ";") is none."""
    parts: list[tuple[int, str]] = [(0, "")]
    for token in _SEGMENTS.finditer(text):
        if token.group() == ";":
            parts.append((token.end(), ""))
        else:
            start, segment = parts[-1]
            parts[-1] = (start, segment + token.group())
    return parts[:-1] if len(parts) > 1 and not parts[-1][1].strip() else parts


def _parse_one(text: str) -> Expr:
    from lark.exceptions import LarkError, UnexpectedEOF, UnexpectedInput, UnexpectedToken

    _check_before_parsing(text)
    parser, to_filter = _parser()
    try:
        tree = parser.parse(text)
        return to_filter.transform(tree)
    except UnexpectedInput as exc:
        position = getattr(exc, "column", None)
        at_end = isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END")
        if at_end or not isinstance(position, int) or position < 1:
            position = len(text.rstrip()) + 1
        raise FilterError(text, position, _describe(exc)) from None
    except RecursionError:  # a safety net: _too_deep_at() refuses such filters first
        raise FilterError(text, 1, f"nested more than {MAX_FILTER_DEPTH} levels deep") from None
    except LarkError as exc:  # a transformer error, e.g. an empty phrase
        inner = getattr(exc, "orig_exc", exc)
        position = text.find('""') + 1 or 1
        raise FilterError(text, position, str(inner)) from None


def _check_before_parsing(text: str) -> None:
    """What the grammar would take too long over, or accept and regret."""
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterError(text[:40] + "…", MAX_FILTER_LENGTH, f"longer than {MAX_FILTER_LENGTH} characters")
    bad = NOT_TYPED.search(text.replace("\t", " "))
    if bad is not None:
        raise FilterError(
            text, bad.start() + 1, "control characters (line breaks included) and noncharacters are not allowed"
        )
    if not text.strip():
        raise FilterError(text, 1, "empty filter (use * for everything)")
    too_deep = _too_deep_at(text)
    if too_deep is not None:
        raise FilterError(text, too_deep, f"nested more than {MAX_FILTER_DEPTH} levels deep (parentheses and 'not')")


def _too_deep_at(text: str) -> int | None:
    """The 1-based position where *text* nests deeper than MAX_FILTER_DEPTH, if it does.
    Each open parenthesis and each 'not' in a row before an operand is a level."""
    levels: list[int] = []  # per open parenthesis: the levels it and the nots before it add
    nots = 0
    for token in _DEPTH_TOKENS.finditer(text):
        word = token.group()
        if word.lower() == "not":
            nots += 1
        elif word == "(":
            levels.append(nots + 1)
            nots = 0
        elif word == ")":
            if levels:
                levels.pop()
            nots = 0
        else:
            nots = 0
        if sum(levels) + nots > MAX_FILTER_DEPTH:
            return token.start() + 1
    return None


def normalize_filter(text: str) -> str:
    """Validate and canonicalize a filter as typed by a person (its interests named)."""
    found = sections_of(text)
    if found:
        return "; ".join(f"{s.name}: {s.text}" for s in found)
    return to_text(parse_filter(text))


def filter_fault(text: object) -> str | None:
    """Why a stored filter cannot be used (one digestbot never writes: a restored backup
    someone edited), or None."""
    if not isinstance(text, str):
        return "filter is not text"
    try:
        parse_filter(text)
    except FilterError as exc:
        return f"filter: {' '.join(str(exc).split())[:120]}"
    return None


@lru_cache(maxsize=4096)
def shown_filter(text: str) -> str:
    """A stored filter as pages and digests show it: canonical text of today's rules
    (one stored before them may lack the parentheses they add)."""
    try:
        return normalize_filter(text)
    except FilterError:
        return text


@lru_cache(maxsize=4096)
def uses_liked(filter_text: str) -> bool:
    """Whether a (stored, valid) filter asks for ``liked``: its verdict on an entry then
    depends on the subscriber's model, not on the entry alone."""
    try:
        return Liked() in atoms(parse_filter(filter_text))
    except FilterError:
        return False
