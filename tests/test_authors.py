"""``author:"Name"`` filter atoms: folding, which names match, the why line, and a
repository's owner as its author, down to what ``preview`` prints."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.filter_terms import Author, make_author, to_text
from bot.choose.filters import FilterError, normalize_filter, parse_filter
from bot.choose.matching import FilterInput, explain, matches
from bot.choose.names import fold_name, same_person
from bot.choose.select import select_for
from bot.choose.tagging import load_rules
from bot.ingest.storing import ingest_bytes
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from tests.conftest import ROOT
from tests.helpers import render_dump, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)

names = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)


def doc(*authors: str) -> FilterInput:
    return FilterInput({}, "A title", "A summary", authors)


@given(names)
@example("İstanbul Ünal")
@example("Smith, J.")
@example("ǅemal ﬁtz")
def test_folding_is_idempotent(name: str) -> None:
    once = fold_name(name)
    assert fold_name(" ".join(once)) == once
    assert all(word == word.casefold() and word.isalnum() for word in once)


@given(names)
@example("Ángel M. de la Peña")
def test_a_name_always_matches_itself(name: str) -> None:
    if fold_name(name):
        assert same_person(fold_name(name), fold_name(name))
        assert matches(Author(name), doc(name))
        assert parse_filter(to_text(make_author(name))) == make_author(name)


@pytest.mark.parametrize(
    ("wanted", "author", "same"),
    [
        ("J. Smith", "John Smith", True),
        ("J. Smith", "J Smith", True),
        ("J Smith", "John A. Smith", True),
        ("John Smith", "J. Smith", True),  # the paper gives only the initial
        ("john smith", "JOHN SMITH", True),
        ("Jose Garcia", "José García", True),
        ("Smith, John", "John Smith", True),
        ("Smith", "Jane Smith", True),
        ("J.-P. Dupont", "Jean-Pierre Dupont", True),
        ("Ludwig van Beethoven", "L. van Beethoven", True),
        ("  Ada   Lovelace ", "Ada Lovelace", True),
        ("J. Smith", "Jane Smithson", False),
        ("J. Smith", "Smith John", False),  # the last word is the family name
        ("John Smith", "Jane Smith", False),
        ("A. B. Smith", "B. A. Smith", False),  # given names in order
        ("Smith", "Smithers", False),
    ],
)
def test_which_names_match(wanted: str, author: str, same: bool) -> None:
    assert same_person(fold_name(wanted), fold_name(author)) is same


def test_the_atom_parses_prints_and_explains() -> None:
    expr = parse_filter('AUTHOR:"J. Smith" and not author:"Jane Doe"')
    assert to_text(expr) == 'author:"J. Smith" and not author:"Jane Doe"'
    found = explain(expr, doc("Ada Lovelace", "John Smith"))
    assert found.matched and found.why() == "author: John Smith"
    assert not matches(expr, doc("John Smith", "Jane Doe"))
    assert normalize_filter('author:"Ada \\"the\\" Lovelace" or gpu') == 'author:"Ada \\"the\\" Lovelace" or gpu'
    for bad in ('author:""', 'author:" . "', 'author:"x'):
        with pytest.raises(FilterError):
            parse_filter(bad)


def test_followed_authors_come_first_and_repository_owners_count(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    settings = settings_for(tmp_path)
    papers = [
        ("Plain paper", ["Grace Hopper"], date(2026, 6, 14), "About compilers."),
        ("Her paper", ["Ada Lovelace", "Charles Babbage"], date(2026, 6, 13), "About engines."),
    ]
    repo = "\n".join(
        [
            "karpathy/nanoGPT",
            "",
            "karpathy 2026-06-14 40,000 Python",
            "karpathy/nanoGPT Python",
            "The simplest repository for training GPTs",
            "40,000 6,000",
            "",
            "Problem: training small GPTs. Method: a short script.",
            "",
            "Code",
        ]
    )
    dump = render_dump(papers) + "\n\n" + repo
    ingest_bytes(factory, dump.encode(), name="d", now=NOW, rules=RULES)
    save(
        factory,
        settings,
        [clean_fields("r@example.org", filter='author:"A. Lovelace" or author:"Karpathy" or "compilers"')],
        NOW,
    )
    with factory() as session:
        reader = get_subscriber(session, "r@example.org")
        assert reader is not None
        found = select_for(session, reader, RULES, as_of=NOW)
    whys = {c.entry.content.title: c.explanation.why() for c in found}
    assert whys["Her paper"] == "author: Ada Lovelace"
    assert [c.entry.content.title for c in found][-1] == "Plain paper"  # a followed author outweighs a summary phrase
    owner = [why for title, why in whys.items() if "nanogpt" in title.casefold()]
    assert owner == ["author: karpathy"], whys


def test_preview_prints_the_author_in_the_why_line(tmp_path: Path) -> None:
    from tests.helpers import Cli

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    paper = [("A paper by a followed author", ["Jean-Pierre Sérre"], date(2026, 6, 14), "About groups.")]
    (dumps / "d.txt").write_text(render_dump(paper), encoding="utf-8")
    env = {"DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"), "DIGESTBOT_PATHS__DUMP_DIR": str(dumps), "COLUMNS": "200"}

    cli = Cli(tmp_path, {**_environ(), **env}, placed=False)

    def run(*args: str) -> str:
        return cli(*args).stdout

    run("dumps", "ingest", str(dumps / "d.txt"))
    run("subscribers", "add", "r@example.org", "--filter", 'author:"J.-P. Serre"', "--backfill", "all")
    shown = run("preview", "r@example.org")
    assert "author: Jean-Pierre Sérre" in shown and "A paper by a followed author" in shown


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
