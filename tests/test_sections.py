"""Several interests in one filter ("Spiking: snn or fpga; Long context: "kv cache""):
parsed and printed with their names, the digest grouped by them (each entry once, in
its best section, every interest it matches named), and a reader of one interest gets
exactly the digest they got before sections existed."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, date, datetime, timedelta
from email import policy
from email.parser import BytesParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.candidates import Candidate
from bot.choose.filters import FilterError, normalize_filter, parse_filter, sections_of
from bot.choose.matching import Explanation, Hit
from bot.choose.select import SelectionCache
from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.domain import EntryKind
from bot.ingest.storing import ingest_bytes, ingest_file
from bot.mail.parts import Parts
from bot.mail.render import Renderer, web_links
from bot.plan import plan, resend
from bot.plan.sections import Sectioner, best_section
from bot.store.contents import digest_contents
from bot.store.digests import list_digests
from bot.store.engine import make_engine, sessions, upgrade
from bot.store.ledger import Planned
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Sink
from tests.conftest import FIXTURES, ROOT, SEEDS
from tests.helpers import entry_view, render_dump, settings_for
from tests.seed_facts import LMCACHE, MINIMAX, NONPARAM, RESCOM, RESET, SUPRASNN

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY1 = datetime(2026, 6, 14, 12, tzinfo=UTC)
TWO = 'Spiking: snn or fpga; Long context: "sparse attention" or "kv cache" or serving'
GOLDEN = FIXTURES / "one_interest"


def test_a_filter_names_its_interests_and_prints_them_back() -> None:
    text = '  Spiking hardware :  snn  or neuromorphic;Serving: llm and ("kv cache" or serving) ; '
    assert [(s.name, s.text) for s in sections_of(text)] == [
        ("Spiking hardware", "snn or neuromorphic"),
        ("Serving", 'llm and ("kv cache" or serving)'),
    ]
    shown = 'Spiking hardware: snn or neuromorphic; Serving: llm and ("kv cache" or serving)'
    assert normalize_filter(text) == shown and normalize_filter(shown) == shown
    assert parse_filter(text) == parse_filter('snn or neuromorphic or (llm and ("kv cache" or serving))')
    assert sections_of('Odd: "a; b" or c')[0].text == '"a; b" or c'  # a phrase keeps its semicolon
    for plain in ("gpu and llm", 'author:"Smith" or *', "cs.AR", "a:b", "liked"):
        assert sections_of(plain) == () and normalize_filter(plain) == normalize_filter(f" {plain} ")


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("A: gpu; llm", 9, "each interest starts with its name and a colon"),
        ("A: gpu; a: llm", 9, "two interests are named 'a'"),
        ("A: gpu; B: (llm", 16, "unexpected end of filter"),
        ("A: gpu and; B: llm", 11, "unexpected"),
        ("A: ", 4, "empty filter"),
        ("; ".join(f"S{n}: gpu" for n in range(9)), 73, "more than 8 interests"),
        ("N" * 61 + ": gpu", 1, "longer than 60 characters"),
        ("A: gpu;\nB: llm", 8, "control characters"),
        ("Spiking\u2028Bcc: gpu", 8, "control characters"),  # a line break is no name's
        ("Spiking\ufffe: gpu", 8, "noncharacters"),
        ("Spiking\uffff: gpu; B: llm", 8, "noncharacters"),
        ("Spi\x7fking: gpu", 4, "control characters"),
        ("A: gpu; B\U0010ffff: llm", 10, "noncharacters"),
    ],
)
def test_a_bad_filter_of_interests_is_one_line_naming_where(text: str, position: int, message: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(text)
    assert caught.value.position == position and message in caught.value.message
    assert "\n" not in str(caught.value)


@given(st.text(alphabet=st.sampled_from(list('ab :;"()*\\\t-\x85\u2028\xa0')), max_size=60))
def test_any_text_is_a_filter_or_one_error(text: str) -> None:
    try:
        shown = normalize_filter(text)
    except FilterError:
        return
    assert normalize_filter(shown) == shown and parse_filter(shown) == parse_filter(text)
    names = [s.name for s in sections_of(shown)]
    assert names == [s.name for s in sections_of(text)]
    assert all(ch == " " or not ch.isspace() for name in names for ch in name)  # one line, whatever shows it


def test_long_runs_where_a_name_may_end_are_read() -> None:
    assert [s.name for s in sections_of("a" + " \t" * 995 + ": x")] == ["a"]
    for text, message in (("a" + " " * 1990 + ":", "unexpected ':'"), ("x: " * 1_000_000, "longer than 2000")):
        with pytest.raises(FilterError, match=message):
            parse_filter(text)


def test_interests_go_through_the_csv_and_a_bad_one_is_the_rows_error(factory: sessionmaker[Session]) -> None:
    from bot.subscribers.csv_io import export_csv, import_csv

    text = (
        "email,filter\n"
        'two@example.org,"Spiking: snn or fpga;Serving: llm and ""kv cache"""\n'
        'bad@example.org,"Spiking: snn; llm"\n'
    )
    report = import_csv(factory, Settings(), text, DAY1)
    reason = "filter: 'Spiking: snn; llm': position 15: each interest starts with its name and a colon"
    assert report.created == 1 and [(e.line, e.reason) for e in report.errors] == [(3, reason + ' ("Serving: llm")')]
    exported = export_csv(factory)
    assert 'two@example.org,,"Spiking: snn or fpga; Serving: llm and ""kv cache""",' in exported
    with factory() as session:
        reader = get_subscriber(session, "two@example.org")
    assert reader is not None and [s.name for s in sections_of(reader.filter)] == ["Spiking", "Serving"]
    again = import_csv(factory, Settings(), exported, DAY1)
    assert (again.created, again.updated, again.errors) == (0, 0, ())


def _why(score: int, atom: str) -> Explanation:
    return Explanation(True, (Hit(atom, "tag", False),), score)


def test_an_entry_goes_in_the_interest_it_matches_best_and_names_the_others() -> None:
    sections = sections_of("A: a; B: b; C: c")
    assert best_section(sections, [_why(2, "a"), _why(3, "b"), None], "x") == (1, "B · b: tag; also in A")
    assert best_section(sections, [None, _why(3, "b"), _why(3, "c")], "x") == (1, "B · b: tag; also in C")  # tie
    assert best_section(sections, [None, None, _why(1, "c")], "x") == (2, "C · c: tag")


def _candidate(n: int, title: str, tags: tuple[str, ...]) -> Candidate:
    entry = entry_view(
        id=n, key=f"k{n}", kind=EntryKind.PAPER, title=title, authors=("A",), published=None, summary="",
        summary_type="text/plain", links=(), tags=tags, arxiv_id=None, doi=None, first_seen_source_id=None,
        first_seen_at=DAY1, tag_origins={t: frozenset({"header"}) for t in tags},
    )  # fmt: skip
    return Candidate(entry, Explanation(True, (), 1))


def test_readers_of_one_filter_chosen_the_same_share_one_placing_unless_their_model_judges() -> None:
    chosen = [
        _candidate(1, "Serving", ("llm",)),
        _candidate(2, "Spikes", ("snn",)),
        _candidate(3, "Both", ("snn", "llm")),
    ]
    entries = [Planned(c.entry.id, None, "why", c.entry.tags, "u") for c in chosen]
    sectioner = Sectioner(SelectionCache(), load_rules(ROOT / "config" / "tags.toml"))
    first = sectioner.place("Spiking: snn; Serving: llm", chosen, entries, None)
    assert [(p.entry_id, p.section) for p in first[1]] == [(2, "Spiking"), (3, "Spiking"), (1, "Serving")]
    assert first[1][1].why == "Spiking · snn: tag (header); also in Serving"  # a tie goes to the first
    assert sectioner.place("Spiking: snn; Serving: llm", chosen, list(entries), None) is first  # made once
    assert sectioner.place("Spiking: snn; Serving: llm", chosen, entries, frozenset()) is not first
    assert sectioner.place("gpu", chosen, entries, None) == (chosen, entries)  # one interest: as they are


def _cycle(factory: sessionmaker[Session], settings: Settings, now: datetime) -> None:
    plan(factory, settings, RULES, now=now, all_due=True)
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: now))


def _text(data: bytes) -> str:
    part = BytesParser(policy=policy.default).parsebytes(data).get_body(("plain",))
    assert part is not None
    return str(part.get_content()).replace("\r\n", "\n")


def test_a_reader_of_two_interests_gets_sections_each_entry_once(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    settings = settings_for(
        tmp_path, smtp={"port": sink.port, "timeout_seconds": 5}, sender={"from_address": "digest@bot.example"}
    )
    save(factory, settings, [clean_fields("two@example.org", filter=TWO)], DAY1 - timedelta(days=1))
    for day, path in enumerate(sorted(SEEDS.glob("*.txt"))[:3]):
        ingest_file(factory, path, now=DAY1 + timedelta(days=day), rules=RULES)
        _cycle(factory, settings, DAY1 + timedelta(days=day))
    day3 = _text(sink.received[-1].data)
    contents = day3.split("\n\n")[1]
    groups = re.split(r"\n(?=\S)", contents)
    assert [g.split("\n")[0] for g in groups] == ["Spiking", "Long context"]
    titles = [re.sub(r"^\s*\d+\. ", "", line) for g in groups for line in g.split("\n")[1:]]
    assert len(titles) == len(set(titles)) == 5
    assert {t.removesuffix("...")[:30] for t in titles} == {
        t[:30] for t in (RESCOM, SUPRASNN, NONPARAM, LMCACHE, RESET)
    }
    words = " ".join(day3.split())  # the why lines, in the reader's words
    assert "Matches your interest Spiking: " in words, words
    assert "Matches your interest Long context: " in words and "Spiking · " not in words
    assert MINIMAX in _text(sink.received[0].data)

    # An entry of both interests: once, in the one it matches best, both named.
    dump = render_dump(
        [("A spiking neural network accelerator for the KV cache", ["A"], date(2026, 6, 17), "Serving LLMs.")]
    )
    ingest_bytes(factory, dump.encode(), name="both", now=DAY1 + timedelta(days=3), rules=RULES)
    _cycle(factory, settings, DAY1 + timedelta(days=3))
    both = " ".join(_text(sink.received[-1].data).split())
    assert both.count("A spiking neural network accelerator for the KV cache") == 2  # contents and entry
    assert re.search(r"Matches your interest (Spiking|Long context): .*; also in (Long context|Spiking)", both)

    # A resend shows the sections the original showed, even after the filter changed.
    save(factory, settings, [clean_fields("two@example.org", filter="gpu")], DAY1 + timedelta(days=3))
    with factory() as session:
        reader = get_subscriber(session, "two@example.org")
        assert reader is not None
        (third,) = [d for d in list_digests(session, subscriber_id=reader.id) if d.local_date == date(2026, 6, 16)]
    resend(factory, settings, third.id, now=DAY1 + timedelta(days=3, hours=1))
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY1 + timedelta(days=3, hours=1)))
    again = _text(sink.received[-1].data)
    assert again.split("\n\n")[1:3] == day3.split("\n\n")[1:3]


def one_interest_digests(tmp_path: Path) -> dict[str, str]:
    """Subject, plain text, HTML and web version of the seeds' third-day digest of a
    reader of one interest, rendered with fixed links.  Written to tests/fixtures by the
    code before sections (``python -m tests.test_sections``); the test compares."""
    engine = make_engine(f"sqlite:///{tmp_path / 'golden.sqlite3'}")
    upgrade(engine)
    factory = sessions(engine)
    settings = settings_for(tmp_path)
    readers = [clean_fields(f"{n}@example.org", filter=f) for n, f in (("one", "gpu and llm"), ("all", "*"))]
    save(factory, settings, readers, DAY1 - timedelta(days=1))
    for day, path in enumerate(sorted(SEEDS.glob("*.txt"))[:3]):
        ingest_file(factory, path, now=DAY1 + timedelta(days=day), rules=RULES)
        plan(factory, settings, RULES, now=DAY1 + timedelta(days=day), all_due=True)
    links = web_links("https://digest.example.org", "1.AAAAAAAAAAAAAAAAAAAAAAAA")
    mailed = Renderer(ROOT / "templates", search_url="https://arxiv.org/a/{title}", top_picks=3)
    web = Renderer(ROOT / "templates", search_url="https://arxiv.org/a/{title}", fit=False, summary_chars=0)
    found: dict[str, str] = {}
    with factory() as session:
        for email in ("one@example.org", "all@example.org"):
            reader = get_subscriber(session, email)
            assert reader is not None
            last = max(list_digests(session, subscriber_id=reader.id), key=lambda d: d.id)
            content = digest_contents(session, [last.id])[last.id]
            context = web.context(content, links)
            context.update(form_token="0" * 32, verdicts={})
            rendered, page = mailed.render(content, links), web.render_context(context)
            name = email.split("@")[0]
            found |= {f"{name}.subject": rendered.subject, f"{name}.txt": rendered.text}
            found |= {f"{name}.html": rendered.html, f"{name}.web.html": page.html}
    engine.dispose()
    return found


def test_a_reader_of_one_interest_gets_the_same_bytes_as_before_sections(tmp_path: Path) -> None:
    for name, made in one_interest_digests(tmp_path).items():
        assert made.encode() == (GOLDEN / name).read_bytes(), name


if __name__ == "__main__":  # writes the golden files (run with the code they are to hold)
    import tempfile

    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name, made in one_interest_digests(Path(scratch)).items():
            (GOLDEN / name).write_bytes(made.encode())


def test_a_digest_reads_well_in_a_browser_and_on_a_phone(tmp_path: Path) -> None:
    """Issue 65, item 7: "You asked for every paper" stood under 7 of 9 entries (the header
    says it once); the preheader stood as stray grey titles above the heading (it now says
    what it is, and the web version has none); at 375 px "2026-06-14" broke after "06-"
    (a byline's date is "14 Jun 2026" with no-break spaces, in both parts)."""
    made = one_interest_digests(tmp_path)
    for part in ("all.html", "all.txt", "all.web.html"):
        assert made[part].lower().count("you asked for every paper") == 1, part
    assert '<p class="preheader"' in made["all.html"] and "In this digest: " in made["all.html"]
    assert 'class="preheader"' not in made["all.web.html"]
    assert "14&nbsp;Jun&nbsp;2026" in made["one.html"] and "2026-06-14 " not in made["one.txt"]
    assert "14\u00a0Jun\u00a02026" in made["one.txt"]
    # A line that holds a reader's token holds nothing else of the entry: the splice lays it
    # out once a day for every body that shows the entry (a why line joined to it by a
    # template's trimmed newline cost 16 % of the time to build a day's messages).
    for name in ("all.html", "one.html"):
        for line in made[name].splitlines():
            if "/more" in line:
                assert line.lstrip().startswith('<p class="rate"'), (name, line[:120])


def test_a_no_break_space_holds_a_date_together_but_never_a_whole_summary() -> None:
    from bot.mail.framing import wrap_text

    wrapped = wrap_text("x" * 70 + " \u00b7 14\u00a0Jun\u00a02026", 78, "    ")
    assert wrapped.splitlines()[-1].strip() == "14\u00a0Jun\u00a02026"
    summary = "\u00a0".join(["word"] * 200)  # a summary whose every space is a no-break one
    lines = wrap_text(summary, 78, "    ").splitlines()
    assert len(lines) > 10 and max(len(line) for line in lines) <= 78
