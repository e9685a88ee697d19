"""Every reader of outside bytes against whole classes of hostile input (hypothesis):
character references of every kind (surrogates, NUL, out of range, huge), lone
surrogates and NULs as JSON escapes and as raw characters, noncharacters, controls,
line breaks, encoded words, LaTeX and markup, and values too big to be real.

Each reader reads the input or says in one line what is wrong with it; what it returns
holds nothing a store cannot keep (``bot.domain.text.NOT_STORABLE``) and nothing past its
bounds; no library's exception ever leaves it; and what is read can be stored, on
SQLite and on PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from xml.sax.saxutils import escape

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from bot.domain import EntryContent, EntryKind, ParsedEntry, ParsedSource, SourceStatus, SubscriberStatus
from bot.domain.rankers import BUILT_IN, Interleaving
from bot.domain.text import CONTROL_CHARACTERS, NOT_STORABLE, one_line
from bot.ingest.formats import SourceFormatError, parse_any
from bot.ingest.formats import storable as bounds
from bot.ingest.storing import ingest_bytes
from bot.returns.classify import Addresses, classify
from bot.subscribers.csv_io import read_csv
from bot.subscribers.fields import SubscriberInputError, clean_fields
from bot.taste.library import LibraryFileError, read_library
from bot.web.forms import form_with_file, parse_form_lists

REFERENCES = [
    "&#xD800;",
    "&#xDFFF;",
    "&#xdbff;&#xdc00;",
    "&#55296;",
    "&#x110000;",
    "&#1114112;",
    "&#99999999999999999999;",
    "&#x" + "F" * 40 + ";",
    "&#x0;",
    "&#0;",
    "&#x0",
    "&#00000000000000000065;",
    "&#xFFFE;",
    "&#xFFFF;",
    "&#x1;",
    "&#x1b;",
    "&#x7f;",
    "&#x85;",
    "&#x2028;",
    "&#x1F600;",
    "&#x;",
    "&#;",
    "&#",
    "&amp;#xD800;",
    "&nbsp;",
    "&bogus;",
]
CHARACTERS = ["\x00", "\ud800", "\udfff", "\ufffe", "\uffff", "\x7f", "\x1b", "\x0c", "\x85", "\u2028", "\r", "\r\n"]
PIECES = [
    *REFERENCES,
    *CHARACTERS,
    "\\u0000",
    "\\ud800",
    "=?utf-8?q?=00=0D=0A?=",
    "$\\alpha^{2}$",
    "\\char0",
    "^^@",
    "<b>",
    "</i>",
    "<![CDATA[",
    "]]>",
    "&",
    "<",
    '"',
    ",",
    "\n",
    "@",
    "10.1234/x",
    "arXiv:2606.00001",
    "https://example.org/",
]

hostile_text = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(st.characters(exclude_categories=()), max_size=8)), max_size=12
).map("".join)
huge = st.sampled_from([0, 600, 12_000, 300_000]).map(lambda n: "word " * (n // 5))


def assert_storable(value: object, where: str) -> None:
    """Every string in *value* (at any depth) can be kept by both stores."""
    if isinstance(value, str):
        assert not NOT_STORABLE.search(value), (where, value[:200])
    elif isinstance(value, (tuple, list)):
        for item in value:
            assert_storable(item, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            assert_storable(key, where)
            assert_storable(item, where)


def assert_read(source: ParsedSource) -> None:
    assert_storable(source.title, "source title")
    for entry in source.entries:
        content = entry.content
        for part in (entry, content):
            for name in part.__slots__:
                if name != "content":
                    assert_storable(getattr(part, name), name)
        assert len(content.title) <= bounds.TITLE_CHARACTERS
        assert len(content.summary) <= bounds.SUMMARY_CHARACTERS
        assert len(content.authors) <= bounds.AUTHORS
        assert all(len(a) <= bounds.AUTHOR_CHARACTERS for a in content.authors)
        assert len(content.links) <= bounds.LINKS
        assert all(len(link) <= bounds.LINK_CHARACTERS for link in content.links)
        assert len(entry.tags) <= bounds.TAGS
        assert content.summary_type in ("text/plain", "text/html")
        assert content.doi is None or len(content.doi) <= bounds.DOI_CHARACTERS


def read_or_refuse(data: bytes, name: str) -> ParsedSource | None:
    """What ``parse_any`` makes of *data*: a source, or None after a one-line refusal."""
    try:
        source = parse_any(data, name)
    except SourceFormatError as exc:
        said = str(exc)
        assert said.startswith(name) and "\n" not in said and len(said) < 600, said
        assert not NOT_STORABLE.search(said), said
        return None
    assert_read(source)
    return source


# --- documents ------------------------------------------------------------------------------


def rss(title: str, summary: str, author: str, tag: str, link: str, *, raw: bool) -> bytes:
    text = (lambda v: v) if raw else escape
    item = (
        f"<item><title>{text(title)}</title><description>{text(summary)}</description>"
        f"<author>{text(author)}</author><category>{text(tag)}</category><link>{text(link)}</link>"
        f"<guid>{text(title[:40])}</guid></item>"
    )
    good = "<item><title>A good paper beside it</title><description>Fine.</description></item>"
    doc = f'<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel><title>{text(title)}</title>'
    return (doc + item + good + "</channel></rss>").encode("utf-8", "surrogatepass")


def atom(title: str, summary: str, author: str, tag: str, link: str, *, raw: bool) -> bytes:
    text = (lambda v: v) if raw else (lambda v: escape(v, {'"': "&quot;"}))
    doc = (
        '<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>'
        f'<entry><title type="html">{text(title)}</title><id>{text(link)}</id>'
        f'<content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml">{text(summary)}</div></content>'
        f'<author><name>{text(author)}</name></author><category term="{text(tag)}"/>'
        f'<link href="{text(link)}"/></entry>'
        "<entry><title>A good paper beside it</title><id>urn:good</id><summary>Fine.</summary></entry></feed>"
    )
    return doc.encode("utf-8", "surrogatepass")


def json_feed(title: str, summary: str, author: str, tag: str, link: str) -> bytes:
    doc = {
        "version": "https://jsonfeed.org/version/1.1",
        "title": title,
        "items": [
            {
                "id": link,
                "url": link,
                "title": title,
                "content_html": summary,
                "authors": [{"name": author}],
                "tags": [tag],
            },
            {"id": "good", "title": "A good paper beside it", "content_text": "Fine."},
        ],
    }
    return json.dumps(doc).encode()  # ASCII: lone surrogates and NULs travel as \u escapes


def dump(title: str, summary: str, author: str, tag: str, link: str) -> bytes:
    text = f"Filtered by: {tag} × Clear all\n\n{title}\n\n{author} 2026-06-14\n\n{summary} {link}\n\nPDF\n"
    return text.encode("utf-8", "surrogatepass")


fields = st.tuples(hostile_text, hostile_text, hostile_text, hostile_text, hostile_text)


@given(fields, st.booleans())
@example(("A &#xD800; paper", "x &#99999999999999999999; &#x0; y", "A&#x0;", "c&#x110000;", "https://e.org/"), True)
def test_feeds_with_any_character_references_are_read_or_refused_in_one_line(
    values: tuple[str, str, str, str, str], raw: bool
) -> None:
    for name, data in (
        ("f.rss", rss(*values, raw=raw)),
        ("f.atom", atom(*values, raw=raw)),
        ("f.json", json_feed(*values)),
        ("d.txt", dump(*values)),
    ):
        source = read_or_refuse(data, name)
        if source is not None and not raw and name != "d.txt":
            # Escaped text is always a well-formed feed: its good item is always read.
            assert "A good paper beside it" in [e.content.title for e in source.entries], name


@given(huge, huge, st.integers(0, 3_000), st.integers(0, 200))
def test_every_field_is_bounded_whatever_its_size(title: str, summary: str, authors: int, tags: int) -> None:
    doc = {
        "version": "https://jsonfeed.org/version/1.1",
        "items": [
            {
                "id": "https://example.org/1",
                "url": "https://example.org/" + "x" * 3_000,
                "title": title or "t",
                "content_text": summary,
                "authors": [{"name": f"Author {n} " + "y" * (n % 300)} for n in range(authors)],
                "tags": [f"tag{n}" for n in range(tags)],
                "_doi": "10.1234/" + "d" * 300,
            }
        ],
    }
    source = read_or_refuse(json.dumps(doc).encode(), "big.json")
    assert source is not None and len(source.entries) == 1


@dataclass(frozen=True, slots=True)
class _WithMore(EntryContent):
    """The content with fields the bounds do not name, as fields added later are."""

    venue: str | None = None
    keywords: tuple[str, ...] = ()


@given(st.one_of(hostile_text, huge), st.lists(st.one_of(hostile_text, huge), max_size=40))
def test_a_content_field_the_bounds_do_not_name_is_bounded_by_its_value(venue: str, keywords: list[str]) -> None:
    content = _WithMore(EntryKind.PAPER, "t", (), None, "", venue=venue, keywords=tuple(keywords))
    entry = bounds.storable_entry(ParsedEntry(content))
    assert isinstance(entry.content, _WithMore)
    assert_storable([entry.content.venue, *entry.content.keywords], "a field added later")
    assert len(entry.content.venue or "") <= bounds.AUTHOR_CHARACTERS
    assert len(entry.content.keywords) <= bounds.LINKS
    assert all(len(word) <= bounds.AUTHOR_CHARACTERS for word in entry.content.keywords)


def test_a_json_number_too_long_to_read_is_the_feeds_own_failure() -> None:
    data = b'{"version": "https://jsonfeed.org/version/1.1", "items": [{"id": 1' + b"9" * 5000 + b"}]}"
    with pytest.raises(SourceFormatError, match="a number too long to be read"):
        parse_any(data, "x.json")


@given(st.binary(max_size=400), st.sampled_from([b"<rss version='2.0'><channel><item><title>", b'{"version":', b""]))
def test_any_bytes_are_read_or_refused_in_one_line(data: bytes, start: bytes) -> None:
    read_or_refuse(start + data, "any")


@pytest.mark.parametrize("reference", REFERENCES + ["\\u0000", "\\ud800"])
def test_each_reference_is_stored_on_every_store_with_the_good_item_beside_it(
    factory: sessionmaker[Session], reference: str
) -> None:
    """feedparser raises on some of these character references; a NUL would reach PostgreSQL."""
    now = datetime(2026, 6, 14, tzinfo=UTC)
    for name, data in (
        ("f.rss", rss(f"A {reference} paper", f"x {reference} y", "A", "c", "https://e.org/", raw=True)),
        ("f.json", json_feed(f"Another {reference} paper", f"x {reference} y", "A", "c", "https://e.org/j")),
    ):
        result = ingest_bytes(factory, data, name=f"{reference}-{name}", now=now)
        assert result.status is SourceStatus.INGESTED and result.new >= 1, result


# --- subscribers, libraries, returned mail, forms -----------------------------------------------


@given(st.lists(st.tuples(hostile_text, hostile_text, hostile_text), max_size=5), st.sampled_from(["\n", "\r\n"]))
def test_any_csv_is_read_record_by_record(rows: list[tuple[str, str, str]], end: str) -> None:
    text = "email,name,filter" + end + end.join(f"{a}@example.org,{b},{c}" for a, b, c in rows) + end
    good, bad = read_csv(text)
    for fields_read in good:
        assert_storable([fields_read.email, fields_read.name or "", fields_read.filter or ""], "csv")
    for error in bad:
        assert "\n" not in error.reason and error.line >= 2, error


@given(hostile_text, hostile_text, hostile_text)
@example("&#x0; \\u0000", "\\ud800", "10.1234/ab\x00cd")
def test_any_library_export_is_read_or_refused(title: str, abstract: str, doi: str) -> None:
    documents = [
        f"@article{{k, title={{{title}}}, abstract={{{abstract}}}, doi={{{doi}}}}}",
        f"TY  - JOUR\nTI  - {title}\nAB  - {abstract}\nDO  - {doi}\nER  - \n",
        json.dumps([{"title": title, "abstract": abstract, "DOI": doi}]),
        f"{doi}\narXiv:2606.00001 {title}\n",
    ]
    for document in documents:
        try:
            read = read_library(document.encode("utf-8", "surrogatepass"))
        except LibraryFileError as exc:
            assert "\n" not in str(exc)
            continue
        for paper in read.papers:
            assert_storable([paper.key, paper.title, paper.abstract, paper.arxiv_id or "", paper.doi or ""], "library")
            assert len(paper.key) <= 200, paper.key


KNOWN = Addresses(key=b"k" * 32, bounce_address="bounces@example.org", unsubscribe_address="unsub@example.org")


@given(hostile_text, hostile_text, hostile_text)
def test_any_returned_mail_is_classified(sender: str, diagnostic: str, recipient: str) -> None:
    raw = (
        f"From: {sender}\nTo: bounces@example.org\nSubject: Undelivered\nContent-Type: multipart/report; "
        'report-type=delivery-status; boundary="b"\n\n--b\nContent-Type: text/plain\n\n'
        f"{diagnostic}\n--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; x\n\n"
        f"Final-Recipient: rfc822; {recipient}\nAction: failed\nStatus: 5.1.1\n"
        f"Diagnostic-Code: smtp; 550 {diagnostic}\n--b--\n"
    ).encode("utf-8", "surrogatepass")
    found = classify(raw, KNOWN)
    assert_storable([found.token or "", list(found.addresses), found.status, found.diagnostic], "returned mail")


@given(hostile_text, hostile_text)
def test_any_form_is_read_and_a_subscriber_from_it_is_storable_or_refused(name: str, wanted: str) -> None:
    from urllib.parse import quote

    named, filtered = (quote(value, errors="surrogatepass") for value in (name, wanted))
    body = f"email=a%40example.org&name={named}&filter={filtered}"
    multipart = (
        f'--b\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
        f'--b\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\n{wanted}\r\n--b--\r\n'
    ).encode("utf-8", "surrogatepass")
    for form in (
        parse_form_lists("application/x-www-form-urlencoded", body.encode(), max_fields=20),
        parse_form_lists("multipart/form-data; boundary=b", multipart, max_fields=20),
        {
            key: [value]
            for key, value in form_with_file("multipart/form-data; boundary=b", multipart, "file")[0].items()
        },
    ):
        try:
            cleaned = clean_fields(
                email="a@example.org", name=form.get("name", [""])[0], filter=(form.get("filter") or [None])[0]
            )
        except SubscriberInputError as exc:
            assert "\n" not in str(exc)
            continue
        assert_storable([cleaned.name or "", cleaned.filter or ""], "form")
        assert cleaned.status in (None, SubscriberStatus.ACTIVE)


def test_the_commands_read_a_feed_of_each_reference_and_the_good_dump_after_it(tmp_path) -> None:  # noqa: ANN001
    """Item 1 as the issue found it: 'dumps ingest feed.rss' printed a traceback, and 'run
    --once' with that file before a good dump never reached the dump."""
    from tests.conftest import SEEDS
    from tests.helpers import Cli

    cli = Cli(tmp_path)
    folder = tmp_path / "dumps"
    folder.mkdir()
    for n, reference in enumerate(REFERENCES[:8]):
        (folder / f"a-{n}.rss").write_bytes(
            rss(f"Paper {n} {reference}", reference, "A", "c", "https://e.org/", raw=True)
        )
    (folder / "b-good.txt").write_bytes(sorted(SEEDS.glob("*.txt"))[0].read_bytes())
    said = cli("dumps", "ingest", str(folder / "a-0.rss"))
    assert "2 entries, 2 new" in said.stdout  # the hostile item and the good one beside it
    ran = cli("run", "--once", env={"DIGESTBOT_WATCH__QUIET_SECONDS": "0"})
    assert "b-good.txt: 5 entries, 5 new" in " ".join(ran.stdout.split()), ran.stdout


@given(st.one_of(hostile_text, st.text(alphabet=st.sampled_from(" a\t\n\x85\u2028\u00a0\x1f"), max_size=12)))
@example(" a")
@example("a  b")
@example("a\u3000b")
def test_one_line_takes_its_short_way_only_when_the_long_way_would_change_nothing(text: str) -> None:
    assert one_line(text) == " ".join(CONTROL_CHARACTERS.sub(" ", text).split())


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.floats(), hostile_text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=8), st.dictionaries(st.sampled_from(["ranker", "order", "theirs", "x"]), inner)
    ),
    max_leaves=30,
)


@given(st.one_of(json_values.map(json.dumps), hostile_text), st.integers(0, 8))
@example('{"ranker": "bm25", "order": [1, 0], "theirs": [true]}', 2)
@example('{"ranker": "bm25", "order": [1, 0, 2], "theirs": [1]}', 3)
@example('{"ranker": "built-in", "order": [0], "theirs": []}', 1)
@example('{"ranker": "bm25", "order": [0, 0], "theirs": []}', 2)
@example("[" * 100_000, 1)
def test_a_stored_interleaving_from_a_backup_is_one_of_its_body_or_none(text: str, size: int) -> None:
    """A digest's order comes from a backup as any text: it is read as an order of the
    body's positions (each once, the outside ranker's a subset) or not at all."""
    pinned = Interleaving.from_text(text, size)
    if pinned is not None:
        assert sorted(pinned.order) == list(range(size)) and pinned.theirs <= set(pinned.order)
        assert Interleaving.from_text(pinned.as_text(), size) == pinned
        assert pinned.ranker != BUILT_IN and len(pinned.ranker) <= 40


def test_an_interleaving_pinned_is_read_back_the_same() -> None:
    pinned = Interleaving("bm25", (2, 0, 1), frozenset({2}))
    assert Interleaving.from_text(pinned.as_text(), 3) == pinned
    assert [pinned.placed_by(n) for n in pinned.order] == ["bm25", BUILT_IN, BUILT_IN]
    assert Interleaving.from_text(pinned.as_text(), 4) is None  # another body's


@given(st.integers(0, 2000), st.data())
def test_every_interleaving_written_is_within_the_length_read_and_a_longer_text_is_never_parsed(
    size: int, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(size)))
    theirs = frozenset(data.draw(st.sets(st.sampled_from(order), max_size=size)) if size else ())
    pinned = Interleaving("r" * 40, tuple(order), theirs)
    assert Interleaving.from_text(pinned.as_text(), size) == pinned


def test_an_interleaving_longer_than_any_written_is_never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """30 MB of one list took rankers report 2.4 s and 480 MB to parse."""
    import json

    import bot.domain.rankers

    parsed: list[int] = []

    class Counting:
        @staticmethod
        def loads(text: str) -> object:
            parsed.append(len(text))
            return json.loads(text)

        dumps = staticmethod(json.dumps)

    monkeypatch.setattr(bot.domain.rankers, "json", Counting)
    assert Interleaving.from_text('{"order": [' + "1, " * 10_000_000 + "1]}", 30) is None
    pinned = Interleaving("bm25", (2, 0, 1), frozenset({2}))
    assert Interleaving.from_text(pinned.as_text(), 3) == pinned
    assert parsed == [len(pinned.as_text())]
