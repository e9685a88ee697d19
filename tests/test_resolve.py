"""Identity precedence and the merge policy (bot.ingest.resolve), in memory: no store."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date

from hypothesis import given
from hypothesis import strategies as st

from bot.domain import Announce, EntryContent, EntryKind, ParsedEntry, TagOrigin
from bot.ingest.resolve import (
    EntryRecord,
    IdentityIndex,
    keyed,
    lookups,
    merge_changes,
    merged_links,
    resolve,
    title_hashes,
)
from tests.helpers import parsed_entry


def _paper(**kw) -> ParsedEntry:
    base = {"kind": EntryKind.PAPER, "title": "A Title", "authors": ("Ada",), "published": None, "summary": "s"}
    return parsed_entry(**{**base, **kw})


def _known(item: ParsedEntry, entry_id: int) -> EntryRecord:
    """*item* as if an earlier source had stored it under *entry_id*."""
    (record,) = resolve(keyed([item]), IdentityIndex(), source_id=1).records
    record.id, record.created = entry_id, False
    return record


def _index(*records: EntryRecord) -> IdentityIndex:
    index = IdentityIndex()
    for record in records:
        index.add(record)
    return index


def _find(index: IdentityIndex, item: ParsedEntry) -> int | None:
    (entry,) = keyed([item])
    found = index.find(entry.item, entry.key, entry.title_norm)
    return None if found is None else found.id


def test_arxiv_id_wins_over_doi_key_and_title() -> None:
    by_arxiv = _known(_paper(title="Other", arxiv_id="2409.00001"), 1)
    by_doi = _known(_paper(title="Other 2", doi="10.1/x"), 2)
    by_title = _known(_paper(title="A Title"), 3)
    index = _index(by_arxiv, by_doi, by_title)
    assert _find(index, _paper(arxiv_id="2409.00001", doi="10.1/x")) == 1
    assert _find(index, _paper(doi="10.1/x")) == 2
    assert _find(index, _paper()) == 3


def test_a_repo_is_found_by_owner_name_in_any_case_never_by_title() -> None:
    repo = _known(_paper(kind=EntryKind.REPO, title="LMCache", repo="LMCache/LMCache"), 7)
    index = _index(repo)
    assert _find(index, _paper(kind=EntryKind.REPO, title="x", repo="lmcache/LMCACHE")) == 7
    assert _find(index, _paper(title="LMCache")) is None


def test_same_title_with_different_ids_is_two_papers() -> None:
    index = _index(_known(_paper(arxiv_id="2409.00001"), 1), _known(_paper(title="B", doi="10.1/b"), 2))
    assert _find(index, _paper(arxiv_id="2409.00002")) is None
    assert _find(index, _paper(title="B", doi="10.1/c")) is None
    # Knowing an id on one side only is no conflict: the title matches.
    assert _find(index, _paper(doi="10.1/a")) == 1


def test_lookups_name_every_identity_a_match_could_come_through() -> None:
    items = keyed([_paper(arxiv_id="2409.00001"), _paper(title="Only a title"), _paper(doi="10.1/X".lower())])
    hashes = title_hashes(items)
    wanted = lookups(items, hashes)
    assert wanted.arxiv_ids == ["2409.00001"] and wanted.dois == ["10.1/x"]
    assert set(wanted.title_hashes) == set(hashes.values())
    assert {i.key for i in items} <= set(wanted.keys)


def test_the_latest_summary_wins_and_ids_are_learned_not_replaced() -> None:
    known = _known(_paper(summary="old", doi="10.1/a"), 1)
    later = _paper(summary="<p>new</p>", summary_type="text/html", arxiv_id="2409.00001", doi="10.1/b")
    changes = merge_changes(known, later, "a title")
    assert changes == {"summary": "<p>new</p>", "summary_type": "text/html", "arxiv_id": "2409.00001"}
    assert merge_changes(known, _paper(summary="", doi="10.1/b"), "a title") == {}


def test_only_a_replacement_changes_title_authors_and_date() -> None:
    known = _known(_paper(), 1)
    revised = _paper(title="A Better Title", authors=("Ada", "Bob"), published=date(2026, 1, 2))
    assert merge_changes(known, revised, "a better title") == {}
    replaced = merge_changes(known, replace(revised, announce=Announce.REPLACE), "a better title")
    assert replaced == {
        "title": "A Better Title",
        "title_norm": "a better title",
        "authors": ("Ada", "Bob"),
        "published": date(2026, 1, 2),
    }


def test_links_are_the_union_and_github_links_compare_without_case() -> None:
    assert merged_links(
        ["https://github.com/A/B", "https://x.org/P"], ["https://github.com/a/b", "https://x.org/p"]
    ) == (
        "https://github.com/A/B",
        "https://x.org/P",
        "https://x.org/p",
    )


def test_an_entry_twice_in_one_source_is_one_entry_with_both_tags() -> None:
    items = keyed([_paper(tags=("cs.LG",), summary="first"), _paper(tags=("cs.CL",), summary="second")])
    resolution = resolve(items, IdentityIndex(), source_id=5)
    (record,) = resolution.records
    assert [a.position for a in resolution.appearances] == [0]
    assert record.created and record.content.summary == "second" and record.summary_source_id == 5
    assert record.replaced_summary is None  # nothing stored to keep
    assert list(record.tags) == [("cs.lg", TagOrigin.CATEGORY), ("cs.cl", TagOrigin.CATEGORY)]


def test_a_known_entry_keeps_the_summary_it_had_before_this_source() -> None:
    known = _known(_paper(summary="stored"), 1)
    resolution = resolve(keyed([_paper(summary="one"), _paper(summary="two")]), _index(known), source_id=9)
    assert resolution.records == [known]
    assert known.dirty and known.content.summary == "two" and known.replaced_summary == "stored"


_texts = st.text(max_size=8)
_items = st.builds(
    _paper,
    title=_texts,
    summary=_texts,
    arxiv_id=st.none() | st.sampled_from(["2409.00001", "2409.00002"]),
    doi=st.none() | st.sampled_from(["10.1/a", "10.1/b"]),
    links=st.lists(st.sampled_from(["https://github.com/A/B", "https://github.com/a/b", "https://x.org"])).map(tuple),
    announce=st.sampled_from(list(Announce)),
)


@given(st.lists(_items, min_size=1, max_size=12))
def test_merging_is_idempotent_and_every_item_lands_on_one_record(items: list[ParsedEntry]) -> None:
    index = IdentityIndex()
    resolution = resolve(keyed(items), index, source_id=1)
    assert len(resolution.appearances) == len(resolution.records) <= len(items)
    for entry in keyed(items):
        found = index.find(entry.item, entry.key, entry.title_norm)
        assert found is not None and any(found is r for r in resolution.records)
    # What a source says once more changes nothing it has already said.
    for record in resolution.records:
        for entry in keyed(items):
            once = merge_changes(record, entry.item, entry.title_norm)
            record.title_norm = once.pop("title_norm", record.title_norm)
            record.content = replace(record.content, **once)
            assert merge_changes(record, entry.item, entry.title_norm) == {}


@dataclass(frozen=True, slots=True)
class _WithVenue(EntryContent):
    """The content with a field the merge rule does not name, as one added later is."""

    venue: str | None = None


def _with_venue(venue: str | None) -> ParsedEntry:
    return ParsedEntry(_WithVenue(EntryKind.PAPER, "A Title", ("Ada",), None, "s", venue=venue))


def test_a_field_the_rule_does_not_name_takes_the_later_listings_value() -> None:
    known = _known(_with_venue("SOSP"), 1)
    assert merge_changes(known, _with_venue("OSDI"), "a title") == {"venue": "OSDI"}
    assert merge_changes(known, _with_venue(None), "a title") == {}
    assert merge_changes(known, _with_venue(""), "a title") == {}
    assert merge_changes(known, _with_venue("SOSP"), "a title") == {}
