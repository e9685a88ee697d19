"""The why line in the reader's words: what the planner pinned, as the
operator checks it, becomes a sentence in the digest, the web version, the personal
feed and the manage page; ``preview`` and ``tags test`` keep the rule's detail."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bot.mail.why import EVERY_PAPER, library_paper, reader_why
from tests.helpers import digest_item

CASES = [
    ("gpu: tag (header; rule: title, summary)", "Matches your filter: its title and summary mention gpu"),
    ("gpu: tag (rule: summary); llm: tag (rule: summary)", "Matches your filter: its summary mentions gpu and llm"),
    ("llm: tag (category)", "Matches your filter: its source lists it under llm"),
    ('"kv cache": phrase in title', 'Matches your filter: "kv cache" is in its title'),
    ("author: Ada Lovelace", "Matches your filter: by Ada Lovelace, whom you follow"),
    ("liked: your model's pick", "Matches your filter: close to what you keep and like"),
    ("matches everything", EVERY_PAPER),
    (
        "Spiking · snn: tag (header); also in Serving",
        "Matches your interest Spiking: its source lists it under snn; also in Serving",
    ),
    ("close to: 'A; survey' from your library", "Close to 'A; survey' in your library"),
    (
        "gpu: tag (rule: title); close to: 'X' from your library",
        "Matches your filter: its title mentions gpu. Close to 'X' in your library",
    ),
]


@pytest.mark.parametrize(("pinned", "said"), CASES)
def test_a_pinned_line_reads_as_a_sentence(pinned: str, said: str) -> None:
    assert reader_why(pinned) == said
    assert "tag (" not in said and "rule:" not in said


@given(st.text(max_size=200))
@example("\x850\n0")
@example("gpu: tag (header); close to: 'A\u2028title' from your library")
def test_any_pinned_line_reads_as_one_line(pinned: str) -> None:
    said = reader_why(pinned)
    assert isinstance(said, str) and len(said.splitlines()) <= 1 and "\x00" not in said


def test_a_top_pick_names_the_library_paper_it_is_close_to() -> None:
    """Only an entry whose line names a paper of the reader's library may be a Top pick."""
    assert library_paper("gpu: tag; close to: 'A survey: of it' from your library") == "A survey: of it"
    assert library_paper("close to: 'Alone' from your library") == "Alone"
    assert library_paper("matches everything") is None
    assert library_paper("close to: 'x' from your library; also in B") is None  # not the pinned form


def test_a_summary_is_not_continued_in_a_search_for_its_title() -> None:
    """Issue 48, item 9: "Read the whole summary" led to an arXiv title search where the
    dump carried no URL; it opens the web version, which has the summary whole, or is
    not there."""
    from dataclasses import replace
    from datetime import date
    from urllib.parse import quote_plus

    from bot.domain import DigestContent, EntryKind
    from bot.mail.render import Links, Renderer, web_links
    from tests.conftest import ROOT
    from tests.helpers import reader

    search = "https://arxiv.org/a/{title}"
    title = "A paper a dump lists without a link"
    item = digest_item(
        key="k1",
        kind=EntryKind.PAPER,
        title=title,
        authors=("Ada Lovelace",),
        published=date(2026, 6, 14),
        summary="A long summary sentence. " * 80,
        summary_type="text/plain",
        tags=("gpu",),
        why="gpu: tag (rule: summary)",
        arxiv_id=None,
        doi=None,
        links=(),
        url=search.format(title=quote_plus(title)),
    )
    content = DigestContent(1, "scheduled", date(2026, 6, 15), reader(1), (item,), 0)
    renderer = Renderer(ROOT / "templates", search_url=search)
    bare = renderer.render(content, Links("mailto:u@example.org", None))
    assert "Read the whole summary" not in bare.html and "(more: [1])" not in bare.text
    served = renderer.render(content, web_links("https://digest.example.org", "1.AAAA"))
    assert re.search(
        r'href="https://digest.example.org/d/1.AAAA/2026-06-15#e1"[^>]*>Read the whole summary', served.html
    )
    own = replace(item, url="https://example.org/paper")
    kept = renderer.render(replace(content, items=(own,)), Links("mailto:u@example.org", None))
    assert re.search(r'href="https://example.org/paper"[^>]*>Read the whole summary', kept.html)
