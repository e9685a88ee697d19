"""Filter language: parsing, errors with positions, printing, evaluation, explain."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.choose.filter_terms import And, Everything, Not, Or, Phrase, Tag, make_and, make_or, to_text
from bot.choose.filters import FilterError, parse_filter
from bot.choose.matching import FilterInput, explain, matches


def doc(tags: dict[str, set[str]] | None = None, title: str = "", summary: str = "") -> FilterInput:
    return FilterInput({k: frozenset(v) for k, v in (tags or {}).items()}, title, summary)


def test_examples_parse_with_not_over_and_over_or() -> None:
    assert parse_filter("gpu and (llm or moe) and not snn") == And(
        (Tag("gpu"), Or((Tag("llm"), Tag("moe"))), Not(Tag("snn")))
    )
    assert parse_filter('"sparse attention" or serving') == Or((Phrase("sparse attention"), Tag("serving")))
    assert parse_filter("*") == Everything()
    assert parse_filter("a or b and not c") == Or((Tag("a"), And((Tag("b"), Not(Tag("c"))))))
    assert parse_filter("GPU AND Not LLM") == And((Tag("gpu"), Not(Tag("llm"))))
    assert parse_filter("cs.DC or c++ or hardware/fpga or android or notes") == Or(
        (Tag("cs.dc"), Tag("c++"), Tag("hardware/fpga"), Tag("android"), Tag("notes"))
    )
    assert parse_filter(r'"say \"hi\""') == Phrase('say "hi"')


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("gpu and", 8, "unexpected end of filter"),
        ("(gpu or llm", 12, "unexpected end of filter"),
        ("gpu llm", 5, "unexpected 'llm'"),
        ("gpu and or llm", 9, "unexpected 'or'"),
        (")", 1, "unexpected ')'"),
        ('gpu or "open', 8, "unexpected character '\"'"),
        ("", 1, "empty filter"),
        ("   ", 1, "empty filter"),
        ('""', 1, "empty phrase"),
        ("gpu\r\nBcc: x", 4, "control characters"),
    ],
)
def test_invalid_filters_report_the_position(text: str, position: int, message: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    assert info.value.position == position
    assert message in str(info.value)
    assert "\n" not in str(info.value)


# --- property tests -----------------------------------------------------------

TAG_NAMES = ["gpu", "llm", "moe", "snn", "fpga", "cs.dc"]
_tag = st.sampled_from(TAG_NAMES).map(Tag)
_phrase = st.sampled_from(["sparse attention", "kv cache", 'quote " inside', "back\\slash"]).map(Phrase)


def _exprs() -> st.SearchStrategy:
    return st.recursive(
        st.one_of(_tag, _phrase, st.just(Everything())),
        lambda inner: st.one_of(
            inner.map(Not),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: make_and(*xs)),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: make_or(*xs)),
        ),
        max_leaves=12,
    )


_docs = st.builds(
    lambda tags, title, summary: doc({t: {"rule"} for t in tags}, title, summary),
    st.sets(st.sampled_from(TAG_NAMES)),
    st.sampled_from(["", "Sparse Attention for all", "A KV-cache study"]),
    st.sampled_from(["", "we use a kv  cache", "nothing here", 'quote " inside']),
)


@given(_exprs())
def test_printing_round_trips(expr) -> None:
    assert parse_filter(to_text(expr)) == expr


@given(_exprs(), _exprs(), _docs)
def test_de_morgan(a, b, d: FilterInput) -> None:
    assert matches(Not(make_and(a, b)), d) == matches(make_or(Not(a), Not(b)), d)
    assert matches(Not(make_or(a, b)), d) == matches(make_and(Not(a), Not(b)), d)


@given(_exprs(), _docs)
def test_explain_agrees_with_matches(expr, d: FilterInput) -> None:
    result = explain(expr, d)
    assert result.matched == matches(expr, d)
    assert result.score >= 0 and (result.matched or result.score == 0)
    # The planner passes the answer of ``matches`` it already has: the same explanation.
    assert explain(expr, d, matched=result.matched) == result
    assert explain(expr, d, {"gpu": ("title",)}, matched=result.matched) == explain(expr, d, {"gpu": ("title",)})


# --- evaluation -----------------------------------------------------------------


def test_phrases_match_on_word_boundaries_case_and_spacing_insensitively() -> None:
    expr = parse_filter('"sparse attention"')
    assert matches(expr, doc(title="MiniMax Sparse  Attention"))
    assert matches(expr, doc(summary="blockwise sparse\nattention."))
    assert not matches(expr, doc(summary="nonsparse attentions"))
    assert matches(parse_filter('"kv cache"'), doc(summary="the KV-cache layer"))  # punctuation between words is a gap
    assert matches(parse_filter('"ai"'), doc(summary="he said")) is False


def test_explain_says_where_and_scores_title_above_summary() -> None:
    expr = parse_filter('gpu or "sparse attention"')
    in_title = explain(expr, doc({"gpu": {"header"}}, title="Sparse attention kernels"))
    in_summary = explain(expr, doc({"gpu": {"rule"}}, summary="sparse attention"))
    assert [h.where for h in in_title.hits] == ["tag (header)", "phrase in title"]
    assert in_title.why() == 'gpu: tag (header); "sparse attention": phrase in title'
    assert in_title.score > in_summary.score
    only_rule = explain(expr, doc({"gpu": {"rule"}}), {"gpu": ("title",)})
    assert only_rule.hits[0].where == "tag (rule: title)" and only_rule.score == 3
    negated = explain(parse_filter("not snn"), doc({"gpu": {"rule"}}))
    assert negated.matched and negated.hits == () and negated.why() == "matches everything"
