"""Choose stage: people's names as ``author:`` atoms match them (``bot.choose.filters``).

Pure functions: never touches the store.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache


@lru_cache(maxsize=65536)  # an author appears on many entries, and a pass asks again per filter
def fold_name(name: str) -> tuple[str, ...]:
    """A person's name as matching sees it: words of letters and digits, case folded,
    diacritics dropped (NFKD without combining marks), "Last, First" turned round.

        fold_name("Ángel  M. de la Peña") == ("angel", "m", "de", "la", "pena")
        fold_name("Smith, J.") == ("j", "smith")
    """
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", name).casefold())
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    last, comma, first = text.partition(",")
    if comma:
        text = f"{first} {last}"
    return tuple(re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text)))


def _same_word(wanted: str, given: str) -> bool:
    """Equal, or one is the initial of the other ("j" and "john")."""
    return (
        wanted == given
        or (len(wanted) == 1 and given.startswith(wanted))
        or (len(given) == 1 and wanted.startswith(given))
    )


def same_person(wanted: tuple[str, ...], author: tuple[str, ...]) -> bool:
    """Whether the folded name *wanted* (from a filter) names the folded *author*: the
    last words are equal, and each earlier word of *wanted* matches a word of the
    author's, in order, in full or as an initial.  "J. Smith" names "John Smith",
    "J Smith" and "John A. Smith", not "Jane Smithson" or "Smith John"; "Smith"
    names every Smith."""
    if not wanted or not author or wanted[-1] != author[-1]:
        return False
    given = iter(author[:-1])
    return all(any(_same_word(word, candidate) for candidate in given) for word in wanted[:-1])
