"""Rankers stage, protocol: the bytes digestbot sends an outside ranker and the checks
on what it answers (``docs/rankers.md``; ``docs/ranker-protocol.schema.json`` is made
from the models here).

One request carries the day's candidates once and many readers, each with the ids of
the candidates their filter chose; the answer scores exactly those, per reader.
Anything else (another protocol, a reader not asked about or left out, an entry that
was not that reader's candidate or scored twice, a score that is not a finite number,
a wrong type) is the ranker's failure, raised as ``RankerFailure`` with one line that
says which.  Pure: never does I/O, never sees an address or a token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NotRequired

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict  # pydantic asks for this one on Python 3.11

from bot.domain.rankers import RankerCandidate, RankerReader, RankerScore
from bot.domain.text import one_line

PROTOCOL = "digestbot-ranker/1"
REASON_CHARACTERS = 200  # a reason longer than this is cut: a reader never sees it
ERROR_CHARACTERS = 300  # of a failure's one line


class RankerFailure(Exception):
    """A ranker's answer (or the lack of one) that digestbot cannot use, in one line."""


# The messages as typed dicts: pydantic checks them as strictly as models, and reads an
# answer of 100,000 scores about four times faster (no object per score).
_STRICT = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)  # a later version's fields ignored


@with_config(_STRICT)
class WireCandidate(TypedDict):
    id: int
    title: str
    authors: list[str]
    summary: str
    tags: list[str]


@with_config(_STRICT)
class WirePaper(TypedDict):
    title: str
    abstract: str


@with_config(_STRICT)
class WireRating(TypedDict):
    entry: int
    title: str
    rating: Literal["more", "less"]


@with_config(_STRICT)
class WireReader(TypedDict):
    id: str
    candidates: list[int]
    library: list[WirePaper]
    ratings: list[WireRating]
    interests: list[str]


@with_config(_STRICT)
class RankRequest(TypedDict):
    """What digestbot sends: ``POST`` with ``Content-Type: application/json``."""

    protocol: Literal["digestbot-ranker/1"]
    candidates: list[WireCandidate]
    readers: list[WireReader]


@with_config(_STRICT)
class WireScore(TypedDict):
    entry: int
    score: float
    reason: NotRequired[str]


@with_config(_STRICT)
class WireReaderScores(TypedDict):
    id: str
    scores: list[WireScore]


@with_config(_STRICT)
class RankAnswer(TypedDict):
    """What a ranker answers, with status 200 and a JSON body."""

    protocol: Literal["digestbot-ranker/1"]
    readers: list[WireReaderScores]


REQUEST = TypeAdapter(RankRequest)
ANSWER = TypeAdapter(RankAnswer)


def reader_id(key: bytes, ranker: str, subscriber_id: int) -> str:
    """A reader's name for one ranker: stable across passes, different for each ranker,
    and not to be traced back to the subscriber without *key*."""
    mac = hmac.new(key, f"ranker\0{ranker}\0{subscriber_id}".encode(), hashlib.sha256)
    return "r" + mac.hexdigest()[:20]


def batches(readers: Sequence[RankerReader], most: int) -> Iterator[Sequence[RankerReader]]:
    """*readers* in requests of at most *most* readers each, in order."""
    for start in range(0, len(readers), max(1, most)):
        yield readers[start : start + max(1, most)]


def request_body(candidates: Mapping[int, RankerCandidate], readers: Iterable[RankerReader]) -> bytes:
    """One request: the candidates any of *readers* has, each once, then the readers."""
    readers = list(readers)
    wanted = sorted({entry for reader in readers for entry in reader.candidates})
    body = {
        "protocol": PROTOCOL,
        "candidates": [_candidate(candidates[entry]) for entry in wanted],
        "readers": [_reader(reader) for reader in readers],
    }
    return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _candidate(entry: RankerCandidate) -> dict[str, Any]:
    return {
        "id": entry.entry_id,
        "title": entry.title,
        "authors": list(entry.authors),
        "summary": entry.summary,
        "tags": list(entry.tags),
    }


def _reader(reader: RankerReader) -> dict[str, Any]:
    return {
        "id": reader.reader,
        "candidates": list(reader.candidates),
        "library": [{"title": paper.title, "abstract": paper.abstract} for paper in reader.library],
        "ratings": [{"entry": r.entry_id, "title": r.title, "rating": r.verdict} for r in reader.ratings],
        "interests": list(reader.interests),
    }


def read_answer(body: bytes, readers: Sequence[RankerReader]) -> dict[str, dict[int, RankerScore]]:
    """Each reader's scores by entry id, from a ranker's answer to a request about
    *readers*; ``RankerFailure`` when the answer is not one to that request."""
    try:
        answer = ANSWER.validate_json(body)
    except ValidationError as error:
        raise RankerFailure(_validation_line(error)) from None
    asked = {reader.reader: frozenset(reader.candidates) for reader in readers}
    scores: dict[str, dict[int, RankerScore]] = {}
    for answered in answer["readers"]:
        reader = answered["id"]
        candidates = asked.get(reader)
        if candidates is None:
            raise RankerFailure(_cut(f"answers for reader {reader!r}, who was not asked about"))
        if reader in scores:
            raise RankerFailure(_cut(f"answers twice for reader {reader!r}"))
        scores[reader] = _reader_scores(reader, answered["scores"], candidates)
    missing = [reader.reader for reader in readers if reader.reader not in scores]
    if missing:
        raise RankerFailure(_cut(f"no scores for {len(missing)} of {len(readers)} readers (first {missing[0]!r})"))
    return scores


def _reader_scores(reader: str, answered: list[WireScore], candidates: frozenset[int]) -> dict[int, RankerScore]:
    scored: dict[int, RankerScore] = {}
    for score in answered:
        entry = score["entry"]
        if entry not in candidates:
            raise RankerFailure(_cut(f"reader {reader!r}: entry {entry} was not one of its candidates"))
        if entry in scored:
            raise RankerFailure(_cut(f"reader {reader!r}: entry {entry} scored twice"))
        reason = score.get("reason", "")
        scored[entry] = RankerScore(score["score"], one_line(reason)[:REASON_CHARACTERS] if reason else "")
    if len(scored) != len(candidates):
        left = len(candidates) - len(scored)
        raise RankerFailure(_cut(f"reader {reader!r}: {left} of its {len(candidates)} candidates not scored"))
    return scored


def _validation_line(error: ValidationError) -> str:
    """The first problem pydantic found, without the input it found it in (a ranker's
    bytes are never echoed whole)."""
    problems = error.errors(include_input=False, include_url=False)
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "the answer"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return _cut(f"not a {PROTOCOL} answer: {where}: {first['msg']}{more}")


def _cut(line: str) -> str:
    return one_line(line)[:ERROR_CHARACTERS]


def json_schema() -> dict[str, Any]:
    """The protocol as one JSON Schema (draft 2020-12): a request or an answer, each
    under ``$defs`` by its model's name."""
    _, definitions = TypeAdapter.json_schemas(
        [("request", "validation", REQUEST), ("answer", "validation", ANSWER)], ref_template="#/$defs/{model}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://digestbot.invalid/ranker-protocol-1.schema.json",
        "title": f"digestbot ranker protocol ({PROTOCOL})",
        "description": "docs/rankers.md; made by python -m bot.rankers.json_schema, and a test keeps the file equal",
        "oneOf": [{"$ref": "#/$defs/RankRequest"}, {"$ref": "#/$defs/RankAnswer"}],
        **definitions,
    }
