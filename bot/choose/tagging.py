"""Tag rules from ``config/tags.toml``: which rule tags an entry's text earns.

Keyword matching is on whole words, case-insensitive and Unicode-aware, with
one Aho-Corasick automaton for all keywords rather than a regex per rule: a
10,000-entry dump is tagged in one pass over each text.  Pure functions plus
loading the rules file; never touches the store.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import ahocorasick
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

FIELDS = ("title", "summary")
_WORD = re.compile(r"[^\W_]+")


class TagRulesError(ValueError):
    """The rules file cannot be used; ``str()`` is one line naming file and rule."""


class _RuleModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    keywords: list[str] = []
    regex: list[str] = []
    fields: list[str] = Field(default_factory=lambda: list(FIELDS))

    @field_validator("fields")
    @classmethod
    def _known_fields(cls, value: list[str]) -> list[str]:
        unknown = [f for f in value if f not in FIELDS]
        if unknown or not value:
            raise ValueError(f"fields must be a non-empty subset of {list(FIELDS)}")
        return value


@dataclass(frozen=True, slots=True)
class TagRule:
    name: str  # case-folded tag name
    label: str  # as written in the file
    description: str
    keywords: tuple[str, ...]
    regexes: tuple[re.Pattern[str], ...]
    fields: tuple[str, ...]


def nfkc(text: str) -> str:
    """NFKC-normalize (full-width letters, ligatures); ASCII text is returned as is, cheaply."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


# ASCII fast path: lower-case, every non-alphanumeric byte to a space, split.
# Much faster than a regex findall on abstracts, and ingest tags every new entry.
_ASCII_WORD_BREAKS = bytes(c if chr(c).isalnum() else 0x20 for c in range(256))


def _words(text: str) -> list[str]:
    """Case-folded alphanumeric runs of *text* (Unicode letters and digits)."""
    if text.isascii():
        return text.encode("ascii").lower().translate(_ASCII_WORD_BREAKS).decode("ascii").split()
    return _WORD.findall(nfkc(text).casefold())


class TagRules:
    """A compiled rule set; ``match`` gives, per rule tag, the fields it matched in.

    Every keyword (and its plural forms) goes into one Aho-Corasick automaton
    (pyahocorasick), searched over a text's case-folded words joined by single
    spaces: one C pass per text whatever the number of rules.  A hit counts only
    when it starts and ends on a word boundary, i.e. a space in that string.
    """

    def __init__(self, rules: Iterable[TagRule]) -> None:
        self.rules = tuple(rules)
        self._regex_rules = tuple(i for i, r in enumerate(self.rules) if r.regexes)
        forms: dict[str, set[int]] = {}
        for index, rule in enumerate(self.rules):
            for keyword in rule.keywords:
                phrase = " ".join(_words(keyword))
                if phrase:
                    for form in (phrase, phrase + "s", phrase + "es"):
                        forms.setdefault(f" {form} ", set()).add(index)
        self._automaton = ahocorasick.Automaton()
        for form, indices in forms.items():
            # The form is stored with its surrounding spaces: a match is then
            # always a whole run of words.  Its value is the set of its rules
            # as a bit mask (bit i: rule i), merged with one integer OR a hit.
            self._automaton.add_word(form, sum(1 << i for i in indices))
        if forms:
            self._automaton.make_automaton()
        self._empty = not forms
        # Per field, the rules that look at it.
        self._field_masks = {f: sum(1 << i for i, r in enumerate(self.rules) if f in r.fields) for f in FIELDS}

    def __len__(self) -> int:
        return len(self.rules)

    @cached_property
    def fingerprint(self) -> str:
        """Changes whenever what the rules match could change (the planner's
        watermarks are only valid for the rules they were made with)."""
        text = repr([(r.name, r.keywords, [(p.pattern, p.flags) for p in r.regexes], r.fields) for r in self.rules])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _keyword_hits(self, text: str) -> int:
        """The rules whose keywords occur in *text*, as a bit mask."""
        if self._empty:
            return 0
        hits = 0
        for _, mask in self._automaton.iter(" " + " ".join(_words(text)) + " "):
            hits |= mask
        return hits

    def match(self, title: str, summary: str) -> dict[str, tuple[str, ...]]:
        """Rule tag name -> the fields (title, summary) where its rule matched."""
        found: dict[str, list[str]] = {}
        for field, text in (("title", title), ("summary", summary)):
            if not text:
                continue
            hits = self._keyword_hits(text)
            for index in self._regex_rules:
                if not hits >> index & 1 and any(p.search(text) for p in self.rules[index].regexes):
                    hits |= 1 << index
            hits &= self._field_masks[field]
            while hits:  # rules in file order, lowest bit first
                lowest = hits & -hits
                found.setdefault(self.rules[lowest.bit_length() - 1].name, []).append(field)
                hits ^= lowest
        return {name: tuple(fields) for name, fields in found.items()}


def load_rules(path: Path | None) -> TagRules:
    """Rules from a TOML file; None means no rule tags, a missing file is an error."""
    if path is None:
        return TagRules(())
    if not path.is_file():
        raise TagRulesError(f"{path}: tag rules file not found (paths.tags_file)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TagRulesError(f"{path}: {exc}") from None
    rules = []
    seen: set[str] = set()
    for label, body in data.items():
        if not isinstance(body, dict):
            raise TagRulesError(f"{path}: [{label}] must be a table")
        name = label.casefold()
        if name in seen:
            raise TagRulesError(f"{path}: [{label}] repeats a tag name (names are case-insensitive)")
        seen.add(name)
        try:
            model = _RuleModel.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise TagRulesError(f"{path}: [{label}] {where}: {first['msg']}") from None
        try:
            regexes = tuple(re.compile(r, re.IGNORECASE) for r in model.regex)
        except re.error as exc:
            raise TagRulesError(f"{path}: [{label}] regex {exc.pattern!r}: {exc}") from None
        if not model.keywords and not regexes:
            raise TagRulesError(f"{path}: [{label}] needs at least one keyword or regex")
        rules.append(TagRule(name, label, model.description, tuple(model.keywords), regexes, tuple(model.fields)))
    return TagRules(rules)
