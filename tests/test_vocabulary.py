"""The typo warning on filters: which tags nothing carries, and the closest known ones."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.choose.filter_terms import Phrase, Tag
from bot.choose.filters import parse_filter
from bot.choose.vocabulary import UnknownTag, idle_atoms_note, unknown_tags, unknown_tags_note

KNOWN = {"gpu", "llm", "fpga", "snn", "hardware", "moe"}
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12).filter(
    lambda n: n not in ("and", "or", "not", "liked")
)


def test_a_typo_is_named_with_the_closest_tags() -> None:
    found = unknown_tags(parse_filter('gpuu and (lmm or "sparse attention") and not SNN'), KNOWN)
    assert found == (UnknownTag("gpuu", ("gpu",)), UnknownTag("lmm", ("llm",)))
    assert unknown_tags_note(found) == (
        "no entry has the tags 'gpuu' (did you mean gpu?), 'lmm' (did you mean llm?) "
        "and no tag rule makes them, so they match nothing for now"
    )
    assert unknown_tags_note(unknown_tags(parse_filter("zzzzzz"), KNOWN)) == (
        "no entry has the tag 'zzzzzz' and no tag rule makes it, so it matches nothing for now"
    )
    assert unknown_tags(parse_filter("*"), KNOWN) == () and unknown_tags_note(()) == ""


@given(st.lists(names, min_size=1, max_size=5), st.sets(names, max_size=8))
def test_a_tag_is_flagged_exactly_when_it_is_not_known(used: list[str], known: set[str]) -> None:
    expr = parse_filter(" or ".join(used))
    flagged = {u.name for u in unknown_tags(expr, known)}
    assert flagged == {n for n in used if n not in known}
    assert all(set(u.closest) <= known for u in unknown_tags(expr, known))
    # Known tags are matched case-insensitively, as filters are.
    assert unknown_tags(expr, {n.upper() for n in used}) == ()


def test_the_tags_test_line_names_tags_and_phrases() -> None:
    idle = [Phrase("spiking zzz"), Tag("gpuu")]
    assert idle_atoms_note(idle, unknown_tags(parse_filter("gpuu"), KNOWN)) == (
        'matched no entry on its own: "spiking zzz", gpuu (did you mean gpu?)'
    )
