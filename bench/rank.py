"""Ranking benchmark: does a reader's own model put what they care about first?

Usage: python bench/rank.py [--readers 30] [--days 20] [--per-day 150] [--topics 20]
                            [--library 2] [--seed 1] [--two-interests]

A generated corpus of --topics topics (each with words of its own, over words every
abstract uses) arrives as one dump a day, --per-day entries, through the real ingest.
Each simulated reader subscribes with the filter `*` and has a hidden interest: two
topics, liking an entry of them with probability 0.9 and any other entry with
probability 0.03 (noise).  Their library starts as --library papers of their topics
that are not in the store, imported as BibTeX through `subscribers library add`'s service.

Every day, after the real planning pass has trained the models (`refresh_models`),
today's entries are ranked twice for each reader: as the filter alone orders them
(for `*`, every entry weighs the same) and in the blended order of their model
(`bot.taste.ranking`).  The reader then looks at the first 10 of their digest and,
for each with probability 0.5, presses "more like this" if they like it and "less
like this" if not, through the service the web endpoint calls.

Prints, per day, precision@5 and nDCG@10 of both rankings (averaged over readers,
relevance = the hidden interest), then the mean from day 5 on.  Targets: the model's
precision@5 at least 2 x the filter's after 5 days of feedback, and never below it
on day 0.

--two-interests: the topics are split into two fields, each marked by a word every
paper of it carries, and each reader follows both as two named interests
("Alpha: <word of the first>; Beta: <word of the second>"), wanting one topic of
each.  Their library holds --library papers of each wanted topic.  Every day each
section of their digest (the entries ``Sectioner`` puts in it) is ranked twice: by
the one model of everything they keep and rate, and by the model of that interest
(``bot.taste.interests``; the one model where an interest has none yet).  They rate
about half of the first five entries of each section of the digest they get (the
per-interest order), each under its section.  Prints precision@5 per section
(averaged over readers and sections) of both rankings, then the mean from day 5 on.

--challenger bm25|random: an outside ranker (``bench/challenger.py``): the example
BM25 ranker as a process of its own, or one that scores at random, asked each day
for each reader's order of today's entries.  Each digest is the first 10 of a
team-draft interleaving of the model's order and the challenger's, and the readers
rate those.  Prints per day precision@5 of both and the challenger's wins, losses and
ties so far, then the sign test's p-value and whether the verdict agrees with the
better precision.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.challenger import (  # noqa: E402
    READER_SECONDS,
    Scores,
    asking,
    challenger,
    embedding_scorer,
    rank_day_interleaved,
)
from bench.english import COMMON, topic_words  # noqa: E402
from bench.send import add_subscribers  # noqa: E402
from bot.choose.filters import sections_of  # noqa: E402
from bot.choose.select import SelectionCache, select_for  # noqa: E402
from bot.choose.tagging import TagRules  # noqa: E402
from bot.ingest.storing import ingest_bytes  # noqa: E402
from bot.plan.sections import Sectioner  # noqa: E402
from bot.rankers.interleave import Verdict, tally  # noqa: E402
from bot.store.engine import make_engine, sessions, upgrade  # noqa: E402
from bot.store.subscribers import list_subscribers  # noqa: E402
from bot.taste.library_service import give_feedback, import_library  # noqa: E402
from bot.taste.ranking import TastePass  # noqa: E402
from bot.taste.training import ModelsReport, refresh_models
from tests.helpers import render_dump  # noqa: E402

START = datetime(2026, 3, 2, 6, tzinfo=UTC)
THRESHOLDS = (0.1, 0.2, 0.3, 0.5)
LIKED: dict[float, list[tuple[float, float]]] = {t: [] for t in THRESHOLDS}  # (precision, recall) per reader-day
SYLLABLES = "ka lo mi ne ru sa te vo zi pa qu ro fe di gu ba he ji mo nu".split()


class Corpus:
    """Topics with words of their own, and the words every abstract uses."""

    def __init__(self, topics: int, rng: random.Random, *, english: bool = False) -> None:
        words = sorted({a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES})
        rng.shuffle(words)
        self.common = COMMON if english else words[:400]
        self.topic_words = (
            topic_words()[:topics] if english else [words[400 + 30 * t : 430 + 30 * t] for t in range(topics)]
        )
        self.rng = rng
        self.count = 0

    def paper(self, topic: int) -> tuple[str, str, int]:
        """(title, abstract, topic); a third of them touch a second topic a little."""
        rng, own = self.rng, self.topic_words[topic]
        other = self.topic_words[rng.randrange(len(self.topic_words))] if rng.random() < 0.33 else own
        self.count += 1

        def word(share: float) -> str:
            pick = rng.random()
            if pick < share:
                return rng.choice(own)
            if pick < share + 0.05:
                return rng.choice(other)
            return rng.choice(self.common)

        title = " ".join(word(0.15) for _ in range(rng.randint(6, 10))).capitalize() + f" (no. {self.count})"
        abstract = " ".join(word(0.04) for _ in range(rng.randint(60, 110))) + "."
        return title, abstract.capitalize(), topic


def precision_at(ranked: list[bool], k: int) -> float:
    return sum(ranked[:k]) / k


def ndcg_at(ranked: list[bool], k: int) -> float:
    gains = sum(1 / math.log2(i + 2) for i, good in enumerate(ranked[:k]) if good)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, sum(ranked))))
    return gains / ideal if ideal else 0.0


def bibtex(papers: list[tuple[str, str, int]]) -> bytes:
    return "\n".join(
        f"@article{{lib{n},\n  title = {{{title}}},\n  abstract = {{{abstract}}},\n  year = {{2025}}\n}}"
        for n, (title, abstract, _) in enumerate(papers)
    ).encode()


def readers_of_two_topics(args: argparse.Namespace, corpus: Corpus, rng: random.Random, folder: Path):
    """A store of --readers readers with `*`, each wanting two topics and holding
    --library papers of them: the engine, its sessions, the readers and their topics."""
    engine = make_engine(f"sqlite:///{folder / 'rank.db'}")
    upgrade(engine)
    factory = sessions(engine)
    add_subscribers(factory, ["*"] * args.readers, created=START - timedelta(days=1))
    with factory() as session:
        readers = list_subscribers(session)
    interests = {r.id: set(rng.sample(range(args.topics), 2)) for r in readers}
    for r in readers:
        papers = [corpus.paper(rng.choice(sorted(interests[r.id]))) for _ in range(args.library)]
        import_library(factory, r.id, bibtex(papers), START)
    return engine, factory, readers, interests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readers", type=int, default=30)
    parser.add_argument("--days", type=int, default=20)
    parser.add_argument("--per-day", type=int, default=150)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--library", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--two-interests", action="store_true", help="readers of two named interests (see above)")
    parser.add_argument("--challenger", choices=("bm25", "random"), help="interleave an outside ranker (see above)")
    parser.add_argument("--embeddings", metavar="URL", help="interleave the readers' embeddings models (see above)")
    parser.add_argument("--embedding-model", default="wordllama-l2-256", help="the model --embeddings names")
    args = parser.parse_args()
    if args.days < 1 or args.readers < 1:
        parser.error("--days and --readers must be at least 1")
    if args.embeddings:
        args.topics = min(args.topics, len(topic_words()))
    rng = random.Random(args.seed)
    corpus = Corpus(args.topics, rng, english=bool(args.embeddings))
    if args.two_interests:
        two_interests(args, corpus, rng)
        return
    if args.challenger or args.embeddings:
        interleaved(args, corpus, rng)
        return
    with tempfile.TemporaryDirectory() as folder:
        engine, factory, readers, interests = readers_of_two_topics(args, corpus, rng, Path(folder))
        topic_of: dict[str, int] = {}
        likes: dict[tuple[int, str], bool] = {}
        print(f"{args.readers} readers with `*`, {args.per_day} entries a day over {args.topics} topics")
        print(f"{'day':>3} {'p@5 filter':>10} {'p@5 model':>9} {'nDCG@10 filter':>14}", end="")
        print(f" {'nDCG@10 model':>13} {'train s':>7} {TrainingFigures.HEADER}")
        rows = []
        training = TrainingFigures()
        for day in range(args.days):
            now = START + timedelta(days=day)
            todays = [corpus.paper(rng.randrange(args.topics)) for _ in range(args.per_day)]
            for title, _, topic in todays:
                topic_of[title] = topic
            dump = render_dump([(t, ["A. Author"], date(2026, 3, 2) + timedelta(days=day), a) for t, a, _ in todays])
            ingest_bytes(factory, dump.encode(), name=f"day{day}.txt", now=now, rules=TagRules(()))
            started = time.perf_counter()
            training.add(refresh_models(factory, now))
            trained = time.perf_counter() - started
            rows.append(rank_day(factory, readers, interests, topic_of, likes, now, rng))
            p_f, p_m, n_f, n_m = rows[-1]
            print(f"{day:>3} {p_f:>10.3f} {p_m:>9.3f} {n_f:>14.3f} {n_m:>13.3f} {trained:>7.1f} {training.last}")
        settled = 5 if len(rows) > 5 else 0  # the days after the models' first five, when there are any
        late = rows[settled:]
        p_f, p_m = statistics.mean(r[0] for r in late), statistics.mean(r[1] for r in late)
        print(
            f"days {settled}-{args.days - 1}: precision@5 filter {p_f:.3f}, model {p_m:.3f} "
            f"(x{p_m / max(p_f, 1e-9):.1f})"
        )
        print(f"day 0: precision@5 filter {rows[0][0]:.3f}, model {rows[0][1]:.3f}")
        print(training.summary())
        for threshold, found in LIKED.items():
            late_found = found[len(found) // 4 :]
            precision = statistics.mean(p for p, _ in late_found)
            recall = statistics.mean(r for _, r in late_found)
            print(f"liked above {threshold}: precision {precision:.2f}, recall {recall:.2f} (last three quarters)")
        engine.dispose()


def rank_day(factory, readers, interests, topic_of, likes, now, rng) -> tuple[float, float, float, float]:
    """Today's entries ranked for each reader by the filter and by their model; their
    feedback on the first ten of their digest.  The four means."""
    scores: list[tuple[float, float, float, float]] = []
    pressed: list[tuple[int, int, str]] = []
    cache = SelectionCache()
    with factory() as session:
        taste = TastePass.open(session)
        models = taste.models(session, [r.id for r in readers]) if taste else {}
        for reader in readers:
            start = now - timedelta(hours=1)
            found = select_for(session, reader, TagRules(()), as_of=now, cache=cache, start=start)

            def liked(title: str, reader_id: int = reader.id) -> bool:
                key = (reader_id, title)
                if key not in likes:
                    odds = 0.9 if topic_of[title] in interests[reader_id] else 0.03
                    likes[key] = rng.random() < odds
                return likes[key]

            by_filter = [liked(c.entry.content.title) for c in found]
            model = models.get(reader.id)
            ordered = found
            if model is not None and taste is not None:
                window = cache.entries(session, start, now)
                reader_taste = taste.reader(model, start, window)
                ordered = reader_taste.rerank(found)
                for threshold in THRESHOLDS:
                    chosen = reader_taste.liked(threshold)
                    hits = sum(liked(c.entry.content.title) for c in found if c.entry.id in chosen)
                    wanted = sum(liked(c.entry.content.title) for c in found)
                    LIKED[threshold].append((hits / len(chosen) if chosen else 1.0, hits / wanted if wanted else 1.0))
            by_model = [liked(c.entry.content.title) for c in ordered]
            scores.append(
                (precision_at(by_filter, 5), precision_at(by_model, 5), ndcg_at(by_filter, 10), ndcg_at(by_model, 10))
            )
            for candidate in ordered[:10]:
                if rng.random() < 0.5:
                    pressed.append(
                        (reader.id, candidate.entry.id, "more" if liked(candidate.entry.content.title) else "less")
                    )
    for reader_id, entry_id, verdict in pressed:  # after the read: SQLite has one writer
        give_feedback(factory, reader_id, entry_id, verdict, now)
    return tuple(statistics.mean(s[i] for s in scores) for i in range(4))  # type: ignore[return-value]


def interleaved(args: argparse.Namespace, corpus: Corpus, rng: random.Random) -> None:
    """The readers of main(), each day's digest interleaved with --challenger's order or,
    with --embeddings, with the order of each reader's model on the embeddings."""
    with tempfile.TemporaryDirectory() as folder, day_scorers(args) as (name, day_scorer):
        engine, factory, readers, interests = readers_of_two_topics(args, corpus, rng, Path(folder))
        topic_of: dict[str, int] = {}
        likes: dict[tuple[int, str], bool] = {}

        def liked(reader_id: int, title: str) -> bool:
            if (reader_id, title) not in likes:
                odds = 0.9 if topic_of[title] in interests[reader_id] else 0.03
                likes[reader_id, title] = rng.random() < odds
            return likes[reader_id, title]

        print(f"{args.readers} readers with `*`, {args.per_day} entries a day, challenger {name}")
        print(f"{'day':>3} {'p@5 built-in':>12} {'p@5 ' + name:>14} {'wins':>5} {'losses':>6} {'ties':>5} {'p':>7}")
        verdicts: list[Verdict] = []
        rows = []
        for day in range(args.days):
            now = START + timedelta(days=day)
            todays = [corpus.paper(rng.randrange(len(corpus.topic_words))) for _ in range(args.per_day)]
            for title, _, topic in todays:
                topic_of[title] = topic
            dump = render_dump([(t, ["A. Author"], date(2026, 3, 2) + timedelta(days=day), a) for t, a, _ in todays])
            ingest_bytes(factory, dump.encode(), name=f"day{day}.txt", now=now, rules=TagRules(()))
            refresh_models(factory, now)
            rows.append(rank_day_interleaved(factory, readers, liked, now, rng, day_scorer(factory, now), verdicts))
            so_far = tally(name, verdicts)
            print(
                f"{day:>3} {rows[-1][0]:>12.3f} {rows[-1][1]:>14.3f} {so_far.wins:>5} {so_far.losses:>6} "
                f"{so_far.ties:>5} {so_far.p_value:>7.2g}"
            )
        ours, theirs = statistics.mean(r[0] for r in rows), statistics.mean(r[1] for r in rows)
        final = tally(name, verdicts)
        print(f"precision@5 over {args.days} days: built-in {ours:.3f}, {name} {theirs:.3f}")
        said = f"{name} won {final.wins}, lost {final.losses}, tied {final.ties}; sign test p = "
        if final.p_value >= 0.05:
            verdict = "no difference shown at p < 0.05"
        else:
            better = name if final.wins > final.losses else "built-in"
            agrees = (better == name) == (theirs > ours)
            verdict = f"{better} better; agrees with precision: {'yes' if agrees else 'NO'}"
        print(f"interleaving over {final.digests} digests: {said}{final.p_value:.2g}: {verdict}")
        if READER_SECONDS:
            mean, slowest = statistics.mean(READER_SECONDS[::2]) * 1000, max(READER_SECONDS) * 1000
            print(f"training a reader's embeddings model: {mean:.1f} ms on average, slowest {slowest:.1f} ms")
        engine.dispose()


@contextmanager
def day_scorers(args: argparse.Namespace) -> Iterator[tuple[str, Callable[[Any, datetime], Scores]]]:
    """The challenger's name and, for a day, what scores its readers: --challenger's
    server, or --embeddings (the day's papers embedded by the product's pass first)."""
    if not args.embeddings:
        with challenger(args.challenger, args.seed) as url:
            yield args.challenger, lambda factory, now: asking(url)
        return
    yield "embeddings", lambda factory, now: embedding_scorer(factory, now, args.embeddings, args.embedding_model)


FIELDS = ("fieldalpha", "fieldbeta")  # the word each paper of a field carries
TWO = 'Alpha: "fieldalpha"; Beta: "fieldbeta"'


def field_paper(corpus: Corpus, topic: int, fields: int) -> tuple[str, str, int]:
    """A paper of *topic*, marked with the word of its field (the first half of the
    topics or the second)."""
    title, abstract, _ = corpus.paper(topic)
    return title, f"{abstract} {FIELDS[topic * 2 // fields]}.", topic


def two_interests(args: argparse.Namespace, corpus: Corpus, rng: random.Random) -> None:
    half = args.topics // 2
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'rank.db'}")
        upgrade(engine)
        factory = sessions(engine)
        add_subscribers(factory, [TWO] * args.readers, created=START - timedelta(days=1))
        with factory() as session:
            readers = list_subscribers(session)
        wanted = {r.id: {rng.randrange(half), half + rng.randrange(half)} for r in readers}
        for r in readers:
            papers = [field_paper(corpus, t, args.topics) for t in sorted(wanted[r.id]) for _ in range(args.library)]
            import_library(factory, r.id, bibtex(papers), START)
        topic_of: dict[str, int] = {}
        likes: dict[tuple[int, str], bool] = {}
        print(
            f"{args.readers} readers of two interests ({TWO}), {args.per_day} entries a day over {args.topics} topics"
        )
        print(
            f"{'day':>3} {'p@5 one model':>13} {'p@5 per interest':>16} {'interest models':>15} {'train s':>7} "
            f"{TrainingFigures.HEADER}"
        )
        rows = []
        training = TrainingFigures()
        for day in range(args.days):
            now = START + timedelta(days=day)
            todays = [field_paper(corpus, rng.randrange(args.topics), args.topics) for _ in range(args.per_day)]
            for title, _, topic in todays:
                topic_of[title] = topic
            dump = render_dump([(t, ["A. Author"], date(2026, 3, 2) + timedelta(days=day), a) for t, a, _ in todays])
            ingest_bytes(factory, dump.encode(), name=f"day{day}.txt", now=now, rules=TagRules(()))
            started = time.perf_counter()
            training.add(refresh_models(factory, now, rules=TagRules(())))
            trained = time.perf_counter() - started
            rows.append(rank_sections(factory, readers, wanted, topic_of, likes, now, rng))
            one, each, modelled = rows[-1]
            print(f"{day:>3} {one:>13.3f} {each:>16.3f} {modelled:>15} {trained:>7.1f} {training.last}")
        late = rows[5:] or rows  # a short run: every day
        one, each = statistics.mean(r[0] for r in late), statistics.mean(r[1] for r in late)
        first = 5 if len(rows) > 5 else 0
        print(f"days {first}-{args.days - 1}: precision@5 per section, one model {one:.3f}, per interest {each:.3f}")
        print(f"day 0: one model {rows[0][0]:.3f}, a model per interest {rows[0][1]:.3f}")
        print(training.summary())
        engine.dispose()


class TrainingFigures:
    """The models a planning pass trained and what training them took (the vocabulary's
    fit apart), day by day and in all."""

    HEADER = f"{'models':>6} {'ms/model':>8}"

    def __init__(self) -> None:
        self.models, self.seconds, self.last = 0, 0.0, ""

    def add(self, report: ModelsReport) -> None:
        self.models += report.models
        self.seconds += report.training_seconds
        each = f"{report.training_seconds * 1000 / report.models:>8.1f}" if report.models else f"{'':>8}"
        self.last = f"{report.models:>6} {each}"

    def summary(self) -> str:
        if not self.models:
            return "models trained: none"
        return (
            f"models trained: {self.models} in {self.seconds:.1f} s, {self.models / self.seconds:.1f} a second, "
            f"{self.seconds * 1000 / self.models:.1f} ms a model"
        )


def rank_sections(factory, readers, wanted, topic_of, likes, now, rng) -> tuple[float, float, int]:
    """Each section of today's digest ranked by the one model and by the interest's;
    the reader's feedback on the first five of each section.  The two means of
    precision@5 and how many interest models ranked."""
    one: list[float] = []
    each: list[float] = []
    pressed: list[tuple[int, int, str, str]] = []
    cache = SelectionCache()
    placing = Sectioner(cache, TagRules(())).interest_of(TWO, None)
    names = [s.name for s in sections_of(TWO)]
    assert placing is not None
    with factory() as session:
        taste = TastePass.open(session)
        models = taste.models(session, [r.id for r in readers]) if taste else {}
        modelled = sum(len(found) for found in taste.interests.values()) if taste else 0
        for reader in readers:
            start = now - timedelta(hours=1)
            found = select_for(session, reader, TagRules(()), as_of=now, cache=cache, start=start)
            model = models.get(reader.id)
            if model is None or taste is None:
                continue

            def liked(title: str, reader_id: int = reader.id) -> bool:
                key = (reader_id, title)
                if key not in likes:
                    likes[key] = rng.random() < (0.9 if topic_of[title] in wanted[reader_id] else 0.03)
                return likes[key]

            window = cache.entries(session, start, now)
            blended = taste.reader(model, start, window).rerank(found)
            by_interest = taste.reader(model, start, window, reader.id).rerank(found, placing)
            for name in names:
                one.append(precision_at([liked(c.entry.content.title) for c in blended if placing(c) == name], 5))
                mine = [c for c in by_interest if placing(c) == name]
                each.append(precision_at([liked(c.entry.content.title) for c in mine], 5))
                for candidate in mine[:5]:
                    if rng.random() < 0.5:
                        verdict = "more" if liked(candidate.entry.content.title) else "less"
                        pressed.append((reader.id, candidate.entry.id, verdict, name))
    for reader_id, entry_id, verdict, name in pressed:  # after the read: SQLite has one writer
        give_feedback(factory, reader_id, entry_id, verdict, now, name)
    return (statistics.mean(one) if one else 0.0), (statistics.mean(each) if each else 0.0), modelled


if __name__ == "__main__":
    main()
