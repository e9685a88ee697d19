"""Tag rules: word boundaries, Unicode, plurals, the rules file, re-tagging stored entries."""

from __future__ import annotations

import re
import unicodedata
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import TagRule, TagRules, TagRulesError, load_rules
from bot.ingest.storing import ingest_bytes, ingest_file, retag_all
from bot.store.entry_reads import find_entry, list_entries, tag_origins_of
from tests.conftest import ROOT
from tests.helpers import render_dump

RULES = """
[AI]
keywords = ["AI", "artificial intelligence"]
[llm]
keywords = ["LLM", "large language model"]
[gpu]
keywords = ["GPU"]
regex = ['\\bH[0-9]00\\b']
[kv]
keywords = ["KV cache"]
fields = ["title"]
[ki]
description = "German: Künstliche Intelligenz"
keywords = ["KI", "künstliche Intelligenz"]
"""


@pytest.fixture
def rules(tmp_path: Path):
    path = tmp_path / "tags.toml"
    path.write_text(RULES, encoding="utf-8")
    return load_rules(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("He said so.", set()),
        ("AI for all", {"ai"}),
        ("Explainable-AI methods", {"ai"}),
        ("AIs and LLMs", {"ai", "llm"}),
        ("LLM-driven design", {"llm"}),
        ("Large Language Models everywhere", {"llm"}),
        ("a GPU-based system", {"gpu"}),
        ("GPUs, GPUs", {"gpu"}),
        ("GPUnet is a name", set()),
        ("on H100 and H800", {"gpu"}),
        ("Künstliche Intelligenz (KI) heute", {"ki"}),
        ("KIWI fruit", set()),
        ("ＡＩ in full width", {"ai"}),
        ("Artificial\nIntelligence", {"ai"}),
    ],
)
def test_keywords_match_whole_words_unicode_aware(rules, text: str, expected: set[str]) -> None:
    assert set(rules.match("", text)) == expected


def _reference_match(rules: TagRules, title: str, summary: str) -> dict[str, tuple[str, ...]]:
    """What the rules file promises, checked the slow way: a keyword's words appear
    as consecutive words of the text (its last one may take "s" or "es")."""

    def words(text: str) -> list[str]:
        return re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).casefold())

    def has(text_words: list[str], keyword: str) -> bool:
        wanted = words(keyword)
        for start in range(len(text_words) - len(wanted) + 1):
            *head, last = text_words[start : start + len(wanted)]
            if head == wanted[:-1] and last in (wanted[-1], wanted[-1] + "s", wanted[-1] + "es"):
                return True
        return False

    found: dict[str, list[str]] = {}
    for field, text in (("title", title), ("summary", summary)):
        for rule in rules.rules:
            if (
                text
                and field in rule.fields
                and (
                    any(has(words(text), k) for k in rule.keywords if words(k))
                    or any(p.search(text) for p in rule.regexes)
                )
            ):
                found.setdefault(rule.name, []).append(field)
    return {name: tuple(fields) for name, fields in found.items()}


_KEYWORDS = ["AI", "GPU", "KV cache", "large language model", "MoE", "Künstliche Intelligenz", "test-time", "a"]
_piece = st.sampled_from(
    [
        *_KEYWORDS,
        *(k + "es" for k in _KEYWORDS),
        "s",
        "es",
        "said",
        "gpus",
        "kv",
        "cache",
        "Ｇ",
        "PU",
        " ",
        "-",
        "_",
        ",",
        "\n",
        "é",
    ]
)


@settings(max_examples=300)  # cheap: no store
@given(
    title=st.lists(_piece, max_size=12).map("".join),
    summary=st.lists(_piece | st.text(max_size=3), max_size=20).map("".join),
    fields=st.lists(st.sampled_from([("title",), ("summary",), ("title", "summary")]), min_size=8, max_size=8),
)
def test_rules_match_what_the_slow_reference_finds(title: str, summary: str, fields: list[tuple[str, ...]]) -> None:
    rules = TagRules(
        TagRule(f"r{n}", f"R{n}", "", (keyword,), (re.compile(r"\bH[0-9]00\b", re.I),) if n == 1 else (), f)
        for n, (keyword, f) in enumerate(zip(_KEYWORDS, fields, strict=True))
    )
    assert rules.match(title, summary) == _reference_match(rules, title, summary)


def test_fields_restrict_where_a_rule_looks(rules) -> None:
    assert rules.match("A KV cache", "") == {"kv": ("title",)}
    assert rules.match("", "A KV-cache") == {}
    assert rules.match("GPU", "also GPU") == {"gpu": ("title", "summary")}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[x]\nkeywords = 3\n", "[x] keywords"),
        ("[x]\n", "[x] needs at least one keyword or regex"),
        ("[x]\nregex = ['(']\n", "[x] regex '('"),
        ("[x]\nkeywords=['a']\nfields=['body']\n", "[x] fields"),
        ("[x]\nkeywords=['a']\n[X]\nkeywords=['b']\n", "[X] repeats a tag name"),
        ("x = = 1", "tags.toml"),
    ],
)
def test_bad_rules_files_name_the_rule(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "tags.toml"
    path.write_text(body)
    with pytest.raises(TagRulesError) as info:
        load_rules(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_shipped_rules_load() -> None:
    rules = load_rules(ROOT / "config" / "tags.toml")
    assert {
        "gpu",
        "llm",
        "moe",
        "attention",
        "serving",
        "scheduling",
        "compilers",
        "fpga",
        "snn",
        "security",
        "simulation",
        "rl",
    } <= {r.name for r in rules.rules}


def test_rule_header_and_category_tags_are_one_tag(factory: sessionmaker[Session], rules) -> None:
    text = "Filtered by: GPU × Clear all\n\n" + render_dump([("A GPU paper", ["A"], date(2026, 1, 1), "On a GPU.")])
    ingest_bytes(factory, text.encode(), name="d", rules=rules)
    with factory() as s:
        (entry,) = list_entries(s)
        assert entry.tags == ("GPU",)
        assert tag_origins_of(s, entry.id) == [("GPU", "header"), ("GPU", "rule")]
        assert [e.content.title for e in list_entries(s, tag="gpu")] == ["A GPU paper"]


def test_retag_after_rules_change(factory: sessionmaker[Session], seed_files: list[Path], tmp_path: Path) -> None:
    for path in seed_files:
        ingest_file(factory, path)  # no rules: only the header tags of dump 003
    with factory() as s:
        assert len(list_entries(s, tag="snn")) == 0
    path = tmp_path / "tags.toml"
    path.write_text('[snn]\nkeywords = ["spiking neural network"]\n')
    assert retag_all(factory, load_rules(path), batch=5) == 16
    with factory() as s:
        assert {e.content.title.split(":")[0] for e in list_entries(s, tag="SNN")} == {"ReSCom", "SupraSNN"}
    path.write_text('[snn]\nkeywords = ["neuromorphic"]\n')
    retag_all(factory, load_rules(path))
    with factory() as s:
        assert [e.content.title.split(":")[0] for e in list_entries(s, tag="snn")] == [
            "Non-Parametric Dual-Manifold Mapping via 8-Bit Bounded Transformation Matrices"
        ]


def test_rule_tags_follow_a_changed_summary(factory: sessionmaker[Session], rules) -> None:
    first = render_dump([("Paper", ["A"], date(2026, 1, 1), "Nothing special.")])
    second = render_dump([("Paper", ["A"], date(2026, 1, 1), "Now with an LLM.")])
    ingest_bytes(factory, first.encode(), name="1", rules=rules)
    ingest_bytes(factory, second.encode(), name="2", rules=rules)
    with factory() as s:
        entry = find_entry(s, list_entries(s)[0].key)
        assert entry is not None and entry.tags == ("llm",)
