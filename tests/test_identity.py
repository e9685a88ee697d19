"""Identity rules of DUMPS.md as pure functions."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from bot.domain import EntryKind, ParsedEntry
from bot.domain.identity import arxiv_id_in, doi_in, entry_key, normalize_title
from tests.helpers import parsed_entry


def test_titles_differing_in_case_whitespace_punctuation_are_equal() -> None:
    a = normalize_title("GF-DiT: Scheduling  Parallelism for Diffusion Transformer Serving")
    b = normalize_title("gf dit -- scheduling parallelism for diffusion transformer serving!")
    assert a == b == "gf dit scheduling parallelism for diffusion transformer serving"


def test_normalization_is_nfkc_and_casefold() -> None:
    assert normalize_title("ﬁne-tuning ＬＬＭｓ") == normalize_title("Fine tuning LLMs") == "fine tuning llms"
    assert normalize_title("Straße") == normalize_title("STRASSE")


_text = st.text(alphabet=string.ascii_letters + string.digits + " -:,.!?()'\"\t", max_size=60)


@given(_text)
def test_normalize_is_idempotent(title: str) -> None:
    once = normalize_title(title)
    assert normalize_title(once) == once
    assert "  " not in once and once == once.strip()


@given(_text, st.sampled_from([str.upper, str.lower, str.title]), st.sampled_from(["", " ", "  ", ".", "!?", " - "]))
def test_case_and_punctuation_never_change_identity(title: str, case, noise: str) -> None:
    mangled = noise + case(title).replace(" ", " " + noise + " ") + noise
    assert normalize_title(mangled) == normalize_title(title)


def test_arxiv_ids_drop_the_version() -> None:
    assert arxiv_id_in("oai:arXiv.org:2409.01234v2") == "2409.01234"
    assert arxiv_id_in("https://arxiv.org/abs/2409.01234v11") == "2409.01234"
    assert arxiv_id_in("arXiv:2409.01234") == "2409.01234"
    assert arxiv_id_in("http://arxiv.org/abs/hep-th/9901001v1") == "hep-th/9901001"
    assert arxiv_id_in("2409.01234v3") == "2409.01234"
    assert arxiv_id_in("see page 2409.01234 of the book") is None
    assert arxiv_id_in("https://example.org/2409.01234") is None


def test_doi_extraction_lowercases() -> None:
    assert doi_in("https://doi.org/10.1145/3600006.3613165.") == "10.1145/3600006.3613165"
    assert doi_in("no doi here") is None


def _paper(**kw) -> ParsedEntry:
    base = {"kind": EntryKind.PAPER, "title": "A Title", "authors": (), "published": None, "summary": ""}
    return parsed_entry(**{**base, **kw})


def test_entry_keys_prefer_ids_then_repo_then_title() -> None:
    assert entry_key(_paper(arxiv_id="2409.01234", doi="10.1/x")) == "arxiv:2409.01234"
    assert entry_key(_paper(doi="10.1/x")) == "doi:10.1/x"
    assert entry_key(_paper(kind=EntryKind.REPO, repo="LMCache/LMCache")) == "repo:lmcache/lmcache"
    assert entry_key(_paper(title="A  title!")) == entry_key(_paper(title="a title"))
    assert entry_key(_paper(title="A title")) != entry_key(_paper(title="Another title"))
