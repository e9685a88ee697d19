"""Rankers stage, judging: team-draft interleaving of two rankings, the verdict of one
digest from its reader's ratings, and the sign test over many digests.

Team-draft (Radlinski, Kurup and Joachims, CIKM 2008): the two rankers take turns, the
one with fewer picks first and a coin deciding a tie, each putting its best entry not
yet placed; every entry remembers which ranker placed it.  A reader's "More like
this" credits that ranker, "Less like this" counts against it; the ranker with more
credit wins the digest.  Pure functions: the coin is the caller's seeded generator, so
a digest's order is made again the same way from the same seed.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from math import comb
from typing import TypeVar

from bot.domain.rankers import BUILT_IN, JudgedDigest

Item = TypeVar("Item", bound=Hashable)


class Verdict(StrEnum):
    WIN = "win"  # the challenger earned more credit than the built-in ranking
    LOSS = "loss"
    TIE = "tie"


def team_draft(
    first: Sequence[Item], second: Sequence[Item], length: int, coin: random.Random
) -> list[tuple[Item, int]]:
    """At most *length* items of *first* and *second* (two orders of one set, or of two
    overlapping sets), each with the team that placed it: 0 for *first*, 1 for *second*."""
    rankings = (first, second)
    positions = [0, 0]
    picks = [0, 0]
    placed: set[Item] = set()
    result: list[tuple[Item, int]] = []

    def next_of(team: int) -> Item | None:
        ranking = rankings[team]
        while positions[team] < len(ranking) and ranking[positions[team]] in placed:
            positions[team] += 1
        return ranking[positions[team]] if positions[team] < len(ranking) else None

    while len(result) < length:
        team = 0 if picks[0] < picks[1] else 1 if picks[1] < picks[0] else coin.randrange(2)
        item = next_of(team)
        if item is None:
            team = 1 - team
            item = next_of(team)
            if item is None:
                break
        placed.add(item)
        picks[team] += 1
        result.append((item, team))
    return result


def verdict(placed_by: Mapping[int, str], more: Iterable[int], less: Iterable[int], challenger: str) -> Verdict:
    """One digest's verdict on *challenger*: *placed_by* names the ranker that placed
    each entry; *more* and *less* are the entries its reader rated so."""
    credit = {BUILT_IN: 0, challenger: 0}
    for entries, sign in ((more, 1), (less, -1)):
        for entry in entries:
            ranker = placed_by.get(entry)
            if ranker in credit:
                credit[ranker] += sign
    if credit[challenger] > credit[BUILT_IN]:
        return Verdict.WIN
    if credit[challenger] < credit[BUILT_IN]:
        return Verdict.LOSS
    return Verdict.TIE


@dataclass(frozen=True, slots=True)
class Tally:
    """A challenger's digests over a window, and how sure the difference is."""

    ranker: str
    digests: int
    wins: int
    losses: int
    ties: int

    @property
    def p_value(self) -> float:
        return sign_test(self.wins, self.losses)

    @property
    def reading(self) -> str:
        """What the figures say, in words: a sign test on a handful of digests says little."""
        decided = self.wins + self.losses
        if decided < DECIDED_ENOUGH:
            return f"too few to judge: {decided} of the {DECIDED_ENOUGH} digests with a preference a verdict needs"
        if self.p_value < 0.05:
            return f"{'better' if self.wins > self.losses else 'worse'} than the built-in order"
        return "no difference shown yet"


DECIDED_ENOUGH = 20  # digests with a preference (wins and losses) before a verdict is said


def tally(ranker: str, verdicts: Collection[Verdict]) -> Tally:
    return Tally(
        ranker,
        len(verdicts),
        sum(v is Verdict.WIN for v in verdicts),
        sum(v is Verdict.LOSS for v in verdicts),
        sum(v is Verdict.TIE for v in verdicts),
    )


def sign_test(wins: int, losses: int) -> float:
    """The two-sided sign test's p-value of *wins* against *losses* (ties left out):
    how likely a split at least this uneven is when neither ranker is better."""
    trials = wins + losses
    if trials == 0:
        return 1.0
    tail = sum(comb(trials, k) for k in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / (1 << trials))


def tallies(judged: Iterable[JudgedDigest]) -> list[Tally]:
    """Per outside ranker (by name), the verdicts of the digests it was interleaved in."""
    verdicts: dict[str, list[Verdict]] = {}
    for digest in judged:
        for challenger in set(digest.placed_by.values()) - {BUILT_IN}:
            verdicts.setdefault(challenger, []).append(verdict(digest.placed_by, digest.more, digest.less, challenger))
    return [tally(name, found) for name, found in sorted(verdicts.items())]
