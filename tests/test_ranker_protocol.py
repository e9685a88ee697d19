"""The outside ranker's protocol (bot.rankers.protocol) and the judge
(bot.rankers.interleave): what is sent, what answer is taken, team-draft, the sign test."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bot.domain import LibraryPaper, RatedEntry
from bot.domain.rankers import BUILT_IN, JudgedDigest, RankerCandidate, RankerReader
from bot.rankers.interleave import Verdict, sign_test, tallies, tally, team_draft, verdict
from bot.rankers.protocol import (
    PROTOCOL,
    REQUEST,
    RankerFailure,
    batches,
    json_schema,
    read_answer,
    reader_id,
    request_body,
)
from tests.conftest import ROOT

CANDIDATES = {
    n: RankerCandidate(n, f"Paper {n} on spiking networks", ("Ada Lovelace",), "About it.", ("cs.NE",))
    for n in range(1, 6)
}
READERS = (
    RankerReader(
        "ra",
        (1, 2, 3),
        library=(LibraryPaper("paper:x", "Spiking networks", "Abstract."),),
        ratings=(RatedEntry(9, "k", "An old paper", "less", __import__("datetime").datetime(2026, 1, 1)),),
        interests=("neuro",),
    ),
    RankerReader("rb", (3, 4)),
)


def answer(readers: dict[str, dict[int, object]], protocol: str = PROTOCOL) -> bytes:
    return json.dumps(
        {
            "protocol": protocol,
            "readers": [
                {"id": reader, "scores": [{"entry": e, "score": s} for e, s in scores.items()]}
                for reader, scores in readers.items()
            ],
        }
    ).encode()


GOOD = {"ra": {1: 0.5, 2: 2, 3: -1.0}, "rb": {3: 0.0, 4: 1e300}}


def test_a_request_sends_each_candidate_once_and_every_reader_without_an_address() -> None:
    body = request_body(CANDIDATES, READERS)
    request = REQUEST.validate_json(body)  # what the schema file describes
    assert [c["id"] for c in request["candidates"]] == [1, 2, 3, 4]  # 3 is two readers', sent once; 5 nobody's
    assert [r["id"] for r in request["readers"]] == ["ra", "rb"]
    ra = request["readers"][0]
    assert ra["library"][0]["title"] == "Spiking networks" and ra["ratings"][0]["rating"] == "less"
    assert ra["interests"] == ["neuro"]
    assert b"@" not in body and body.isascii()


def test_reader_ids_are_stable_per_ranker_and_differ_between_rankers() -> None:
    key = b"k" * 32
    assert reader_id(key, "bm25", 7) == reader_id(key, "bm25", 7)
    assert len({reader_id(key, "bm25", 7), reader_id(key, "embed", 7), reader_id(key, "bm25", 8)}) == 3
    assert "7" not in reader_id(key, "bm25", 7)[1:3] or reader_id(b"other" * 8, "bm25", 7) != reader_id(key, "bm25", 7)


def test_batches_keep_the_order_and_the_size() -> None:
    readers = [RankerReader(str(n), ()) for n in range(7)]
    assert [[r.reader for r in b] for b in batches(readers, 3)] == [["0", "1", "2"], ["3", "4", "5"], ["6"]]


def test_a_good_answer_gives_each_reader_its_scores() -> None:
    scores = read_answer(answer(GOOD), READERS)
    assert {reader: {e: s.score for e, s in by.items()} for reader, by in scores.items()} == {
        "ra": {1: 0.5, 2: 2.0, 3: -1.0},
        "rb": {3: 0.0, 4: 1e300},
    }


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (answer(GOOD, protocol="digestbot-ranker/2"), "protocol"),
        (answer(GOOD).replace(b"0.5", b"NaN"), "finite number"),
        (answer(GOOD).replace(b"0.5", b"Infinity"), "finite number"),
        (answer(GOOD).replace(b"1e+300", b"1e400"), "finite number"),
        (answer(GOOD).replace(b"0.5", b'"0.5"'), "valid number"),
        (answer(GOOD).replace(b'"entry": 1,', b'"entry": 1.0,'), "valid integer"),
        (answer({**GOOD, "rc": {1: 1}}), "'rc', who was not asked about"),
        (answer({"ra": GOOD["ra"]}), "no scores for 1 of 2 readers (first 'rb')"),
        (answer({"ra": {**GOOD["ra"], 4: 1}, "rb": GOOD["rb"]}), "entry 4 was not one of its candidates"),
        (answer({"ra": {1: 1, 2: 1}, "rb": GOOD["rb"]}), "1 of its 3 candidates not scored"),
        (answer(GOOD).replace(b'{"entry": 2', b'{"entry": 1, "score": 1}, {"entry": 2'), "entry 1 scored twice"),
        (answer(GOOD)[:-5], "Invalid JSON"),
        (b"", "Invalid JSON"),
        (b"\xff\xfe", "Invalid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "the answer"),
        (b'{"protocol": "digestbot-ranker/1"}', "readers: Field required"),
    ],
)
def test_a_wrong_answer_is_the_rankers_failure_in_one_line(bad: bytes, says: str) -> None:
    with pytest.raises(RankerFailure) as failure:
        read_answer(bad, READERS)
    line = str(failure.value)
    assert says in line and "\n" not in line and len(line) <= 300, line


def test_an_answer_twice_for_one_reader_is_refused() -> None:
    doubled = json.loads(answer(GOOD))
    doubled["readers"].append(doubled["readers"][0])
    with pytest.raises(RankerFailure, match="answers twice for reader 'ra'"):
        read_answer(json.dumps(doubled).encode(), READERS)


def test_a_long_or_many_lined_reason_is_cut_to_one_short_line_and_unknown_fields_ignored() -> None:
    body = json.loads(answer(GOOD))
    body["readers"][0]["scores"][0]["reason"] = "shares\nspiking\u2028" + "x" * 10_000
    body["readers"][0]["scores"][0]["model"] = "a field of a later version"
    reason = read_answer(json.dumps(body).encode(), READERS)["ra"][1].reason
    assert reason.startswith("shares spiking") and "\n" not in reason and len(reason) == 200


@given(
    st.binary(max_size=400)
    | st.recursive(
        st.none() | st.booleans() | st.floats() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(["protocol", "readers", "id", "scores", "entry", "score"]), inner, max_size=4
            )
        ),
    ).map(lambda value: json.dumps(value, allow_nan=True).encode())
)
@example(answer(GOOD).replace(b"2,", b"true,"))
def test_any_bytes_are_a_good_answer_or_a_one_line_failure(body: bytes) -> None:
    try:
        scores = read_answer(body, READERS)
    except RankerFailure as failure:
        assert "\n" not in str(failure) and len(str(failure)) <= 300
    else:
        assert set(scores) == {"ra", "rb"} and set(scores["ra"]) == {1, 2, 3}


def test_a_second_reader_of_the_schema_file_takes_what_is_sent_and_a_good_answer() -> None:
    from jsonschema import Draft202012Validator

    schema = json.loads((ROOT / "docs" / "ranker-protocol.schema.json").read_text())
    Draft202012Validator.check_schema(schema)

    def validator(name: str) -> Draft202012Validator:
        return Draft202012Validator({**schema, "oneOf": [{"$ref": f"#/$defs/{name}"}]})

    validator("RankRequest").validate(json.loads(request_body(CANDIDATES, READERS)))
    validator("RankAnswer").validate(json.loads(answer(GOOD)))
    assert not validator("RankAnswer").is_valid(json.loads(answer(GOOD).replace(b"0.5", b'"0.5"')))
    assert not validator("RankRequest").is_valid(json.loads(answer(GOOD)))


def _hostile_answers(size: int) -> dict[str, bytes]:
    """Answers of about *size* bytes in the shapes that make readers slow elsewhere."""
    head = b'{"protocol": "digestbot-ranker/1", "readers": [{"id": "ra", "scores": [{"entry": 1, "score": 1, '
    return {
        "a long reason": head + b'"reason": "' + b"a\\u2028\\n " * (size // 12) + b'"}]}]}',
        "a long number": head[: head.rindex(b"1")] + b"0." + b"1" * size + b"}]}]}",
        "a long integer": head.replace(b'"entry": 1', b'"entry": ' + b"9" * size),
        "deep nesting": b"[" * (size // 2) + b"]" * (size // 2),
        "unknown fields": head + b", ".join(b'"f%d": [1, 2, {"x": 3}]' % n for n in range(size // 24)) + b"}]}]}",
        "whitespace": b" " * size + answer(GOOD),
        "a long id": answer(GOOD).replace(b'"rb"', b'"' + b"r" * size + b'"'),
    }


def test_a_hostile_answer_costs_no_more_than_a_good_one_of_its_size() -> None:
    size = 4_000_000
    readers = [RankerReader(f"r{n}", tuple(range(1, 101))) for n in range(size // 2600)]
    good = answer({r.reader: dict.fromkeys(r.candidates, 0.5) for r in readers})

    def seconds(body: bytes, asked: Sequence[RankerReader]) -> float:
        started = time.perf_counter()
        try:
            read_answer(body, asked)
        except RankerFailure as failure:
            assert "\n" not in str(failure) and len(str(failure)) <= 300
        return time.perf_counter() - started

    normal = min(seconds(good, readers) for _ in range(3))
    for shape, body in _hostile_answers(size).items():
        assert len(body) >= size // 2
        took = min(seconds(body, READERS) for _ in range(2))
        # A ratio within one run, with room for a noisy machine: a shape that made the
        # reader superlinear would be hundreds of times off.
        assert took < 5 * normal + 0.25, (shape, took, normal)


def test_the_schema_file_is_the_one_the_models_make() -> None:
    shipped = json.loads((ROOT / "docs" / "ranker-protocol.schema.json").read_text())
    assert shipped == json_schema(), "run: python -m bot.rankers.json_schema > docs/ranker-protocol.schema.json"


# The judge


@given(
    st.permutations(list(range(12))),
    st.permutations(list(range(12))),
    st.integers(0, 14),
    st.integers(0, 2**32),
)
def test_team_draft_places_each_entry_once_in_each_rankers_own_order(
    first: list[int], second: list[int], length: int, seed: int
) -> None:
    drafted = team_draft(first, second, length, random.Random(seed))
    items = [item for item, _ in drafted]
    assert len(items) == len(set(items)) == min(length, 12)
    for team, ranking in ((0, first), (1, second)):
        mine = [item for item, t in drafted if t == team]
        assert mine == sorted(mine, key=ranking.index)  # a team's picks in its ranker's order
    counts = [sum(t == team for _, t in drafted) for team in (0, 1)]
    assert abs(counts[0] - counts[1]) <= 1  # both rankings hold every entry: neither runs out
    assert drafted == team_draft(first, second, length, random.Random(seed))  # made again the same


def test_team_draft_gives_the_first_pick_of_each_round_to_a_coin_and_fills_from_the_longer() -> None:
    firsts = {team_draft([1, 2], [2, 1], 1, random.Random(seed))[0] for seed in range(40)}
    assert firsts == {(1, 0), (2, 1)}  # either ranker may lead
    assert team_draft([1], [5, 6, 7], 4, random.Random(1)) == [(1, 0), (5, 1), (6, 1), (7, 1)] or team_draft(
        [1], [5, 6, 7], 4, random.Random(1)
    ) == [(5, 1), (1, 0), (6, 1), (7, 1)]
    assert team_draft([], [], 3, random.Random(0)) == []


def test_the_ranker_that_placed_an_entry_gets_its_readers_verdict() -> None:
    placed = {1: BUILT_IN, 2: "bm25", 3: "bm25", 4: BUILT_IN}
    assert verdict(placed, more=[2], less=[], challenger="bm25") is Verdict.WIN
    assert verdict(placed, more=[1], less=[], challenger="bm25") is Verdict.LOSS
    assert verdict(placed, more=[], less=[3], challenger="bm25") is Verdict.LOSS
    assert verdict(placed, more=[2], less=[3], challenger="bm25") is Verdict.TIE  # +1 and -1
    assert verdict(placed, more=[2, 3], less=[1, 4], challenger="bm25") is Verdict.WIN
    assert verdict(placed, more=[], less=[], challenger="bm25") is Verdict.TIE
    assert verdict(placed, more=[99], less=[], challenger="bm25") is Verdict.TIE  # not in this digest


def test_the_sign_test() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 5) == 1.0
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(0, 10) == sign_test(10, 0)
    assert sign_test(9, 1) == pytest.approx(2 * 11 / 1024)
    assert 0.0 <= sign_test(5000, 4000) < 1e-20  # exact on large counts, no overflow
    counted = tally("bm25", [Verdict.WIN] * 3 + [Verdict.TIE] * 2 + [Verdict.LOSS])
    assert (counted.digests, counted.wins, counted.losses, counted.ties) == (6, 3, 1, 2)
    assert counted.p_value == pytest.approx(sign_test(3, 1))


def test_the_protocol_docs_name_every_field_of_the_schema() -> None:
    docs = (ROOT / "docs" / "rankers.md").read_text()
    for name, definition in json_schema()["$defs"].items():
        for field in definition["properties"]:
            assert f"`{field}`" in docs, (name, field)


def test_tallies_judge_each_ranker_by_the_digests_it_was_interleaved_in() -> None:
    placed = {1: BUILT_IN, 2: "bm25"}
    other = {1: BUILT_IN, 3: "embed"}
    judged = [
        JudgedDigest(10, placed, more=frozenset({2}), less=frozenset()),  # bm25 wins
        JudgedDigest(11, placed, more=frozenset({1}), less=frozenset()),  # bm25 loses
        JudgedDigest(12, placed, more=frozenset(), less=frozenset()),  # a tie
        JudgedDigest(13, other, more=frozenset({3}), less=frozenset()),  # embed wins
    ]
    found = {t.ranker: (t.digests, t.wins, t.losses, t.ties) for t in tallies(judged)}
    assert found == {"bm25": (3, 1, 1, 1), "embed": (1, 1, 0, 0)}
    assert tallies([]) == []
