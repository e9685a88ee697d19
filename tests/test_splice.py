"""The fast send path (bot.mail.splice) against the simple one (message.build_message).

The contract: for every digest, the message spliced from a shared template is
the simple path's message byte for byte (same Date, same Message-ID given);
where the splice cannot promise that, it is not used.
"""

from __future__ import annotations

import re
import shutil
import zlib
from datetime import UTC, datetime, timedelta
from email import message_from_bytes
from pathlib import Path

import css_inline
import pytest
from hypothesis import given
from hypothesis import strategies as st
from markupsafe import escape
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import SenderConfig, Settings
from bot.domain import RenderedDigest
from bot.ingest.storing import ingest_file
from bot.mail.constant_pool import ChunkPool
from bot.mail.header_lines import folded, html_escape, plain_line, to_line
from bot.mail.mailer import Mailer
from bot.mail.message import POLICY, Headers, build_message, message_bytes, prepared
from bot.mail.parts import Parts
from bot.mail.splice import MessageTemplate, RecipientValues
from bot.plan import plan
from bot.store.contents import digest_content
from bot.store.digests import get_digest
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from tests.conftest import ROOT
from tests.helpers import render_dump

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)

# Several subscribers per filter (so templates are shared), and the values a
# splice could get wrong: quotes, commas and non-ASCII in names, & and ' in
# addresses, an internationalized domain, an empty name.
PEOPLE = [
    ("ada@example.org", "Ada Lovelace", "*"),
    ("grace@example.org", 'Grace "Amazing" Hopper, RADM', "*"),
    ("o'brien&co@example.org", "Flann O'Brien", "*"),
    ("linus@bücher.example", "Linus Æsir-Ødegård", "*"),
    ("noname@example.org", "", "*"),
    ("carver@example.org", "Carver Mead", "snn or fpga"),
    ("misha@example.org", "Михаил", "snn or fpga"),
    ("edsger@example.org", "Edsger W. Dijkstra", '"sparse attention" or "kv cache"'),
    ("barbara@example.org", "Barbara Liskov", "gpu and llm"),
    ("long.name@example.org", "A " * 60 + "Long Name", "gpu and llm"),
]


def _settings(
    tmp_path: Path, *, public_url: str = "", templates: Path = ROOT / "templates", inbox: str = ""
) -> Settings:
    return Settings.model_validate(
        {
            "paths": {"var_dir": str(tmp_path / "var"), "templates_dir": str(templates)},
            "sender": {"from_address": "digest@bot.example", "from_name": "Research Digest"},
            "web": {"public_url": public_url, "signing_key": "splice-test-signing-key-0123456789"},
            "inbox": {"url": inbox},
        }
    )


def _queued(factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]) -> list[int]:
    save(factory, settings, [clean_fields(e, name=n, filter=f) for e, n, f in PEOPLE], DAY - timedelta(days=1))
    for path in seed_files[:3]:
        ingest_file(factory, path, now=DAY - timedelta(hours=1), rules=RULES)
    return list(plan(factory, settings, RULES, now=DAY, all_due=True).planned)


# A text footer that wraps the address with the rest of its sentence: it cannot
# be spliced line by line, so it is rendered again for each subscriber.
WRAPPING_FOOTER = (
    '{{ ("You receive this daily digest because " ~ subscriber_email ~ " is subscribed with the filter above.")'
    " | wrap(78) }}"
)


def _wrapping_templates(tmp_path: Path) -> Path:
    templates = tmp_path / "wrapping-templates"
    shutil.copytree(ROOT / "templates", templates)
    footer = templates / "_footer.txt.j2"
    text = footer.read_text()
    sentence = "You receive this daily digest because {{ subscriber_email }}\nis subscribed with the filter above."
    assert sentence in text
    footer.write_text(text.replace(sentence, WRAPPING_FOOTER))
    return templates


@pytest.mark.parametrize("footer", ["shipped", "wrapping"])
@pytest.mark.parametrize(
    ("public_url", "inbox"),
    [("", ""), ("https://digest.example.org/", ""), ("https://digest.example.org/", "maildir:///var/mail/bot")],
)
def test_spliced_messages_equal_the_simple_path_byte_for_byte(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path], public_url: str, inbox: str, footer: str
) -> None:
    templates = ROOT / "templates" if footer == "shipped" else _wrapping_templates(tmp_path)
    settings = _settings(tmp_path, public_url=public_url, templates=templates, inbox=inbox)
    ids = _queued(factory, settings, seed_files)
    assert len(ids) == len(PEOPLE)
    mailer = Mailer(Parts(settings))
    assert mailer.footer_substituted is (footer == "shipped")
    now = DAY + timedelta(minutes=3)
    with factory() as session:
        rows = [get_digest(session, i) for i in ids]
        built = mailer.build(session, rows, now)
        simple = [mailer.message_bytes(session, row, now) for row in rows]
        wired = mailer.build(session, rows, now, for_wire=True)
    assert mailer.spliced == 2 * len(ids)  # the fast path was taken, not fallen back from
    assert len(mailer.templates) == 4  # one body per filter
    # The four bodies share their entries' lines (those without a filter's marks): the
    # pool holds them once.
    held = sum(t.constant_size for t in mailer.templates.values() if t is not None)
    assert mailer.chunks.nbytes < 0.9 * held, (mailer.chunks.nbytes, held)
    for fast, wire, (data, sender, recipient) in zip(built, wired, simple, strict=True):
        assert fast.error is None
        assert (fast.sender, fast.recipient) == (sender, recipient)
        assert fast.data == data
        assert wire.data == prepared(data)
        # The mailto goes along with the https link only while the inbox is read.
        schemes = re.findall(rb"<(https|mailto):", message_from_bytes(data)["List-Unsubscribe"].encode())
        assert schemes == ([b"https", b"mailto"] if inbox else [b"https"] if public_url else [b"mailto"])


@pytest.mark.parametrize("footer", ["shipped", "wrapping"])
def test_an_address_printed_outside_the_footer_is_spliced_with_either_footer(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path], footer: str
) -> None:
    """With the shipped footer every line of the text part is spliced alike; a footer
    rendered per subscriber covers its own lines, and the lines outside it are
    spliced line by line: either way the address may be printed anywhere and the
    bytes are the simple way's."""
    templates = ROOT / "templates" if footer == "shipped" else _wrapping_templates(tmp_path)
    edited = tmp_path / "edited-templates"
    shutil.copytree(templates, edited)
    header = edited / "digest.txt.j2"
    header.write_text(header.read_text().replace("Your filter:", "Hello {{ subscriber_email }}! Your filter:"))
    settings = _settings(tmp_path, templates=edited)
    ids = _queued(factory, settings, seed_files)
    mailer = Mailer(Parts(settings))
    with factory() as session:
        rows = [get_digest(session, i) for i in ids]
        built = mailer.build(session, rows, DAY)
        simple = [mailer.message_bytes(session, row, DAY)[0] for row in rows]
    assert mailer.spliced == len(ids) and None not in mailer.templates.values()
    assert [b.data for b in built] == simple
    assert b"Hello ada@example.org!" in simple[0]


@pytest.mark.parametrize(
    ("snippet", "allowed"),
    [
        ("<p>{{ subscriber_email }}</p>", True),
        ('{% if manage_url %}<a href="{{ manage_url }}">m</a>{% endif %}', True),
        ("{% if subscriber_email.endswith('.edu') %}hi{% endif %}", False),
        ("{{ subscriber_email | upper }}", False),
        ("{{ 'to ' ~ subscriber_email }}", False),
        ("{% set who = subscriber_email %}{{ who }}", False),
        ("{% if unsubscribe_url %}x{% endif %}", False),
        ("{% include subscriber_email %}", False),
        ("{% filter upper %}{{ subscriber_email }}{% endfilter %}", False),
        ("{% set who %}{{ subscriber_email }}{% endset %}{{ who | reverse }}", False),
        ("{% macro m() %}{{ subscriber_email }}{% endmacro %}{{ m() | upper }}", False),
        ("{% for n in [1, 2] %}{% if n %}<i>{{ subscriber_email }}</i>{% endif %}{% endfor %}", True),
    ],
)
def test_only_templates_that_print_personal_values_are_spliced(tmp_path: Path, snippet: str, allowed: bool) -> None:
    from bot.mail.personal_slots import templates_allow_splicing
    from bot.mail.render import Renderer

    templates = tmp_path / "templates"
    shutil.copytree(ROOT / "templates", templates)
    header = templates / "_header.html.j2"
    header.write_text(header.read_text() + snippet)
    renderer = Renderer(templates, search_url="https://arxiv.org/search/?query={title}")
    assert templates_allow_splicing(renderer) is allowed
    assert templates_allow_splicing(Renderer(ROOT / "templates", search_url="x"))


def test_a_template_edited_in_place_is_read_again_by_the_next_renderer(tmp_path: Path) -> None:
    """Templates are compiled and checked once per process (bot.mail.templates): a renderer
    made after an edit, of the same file, renders and judges the edit, not the old code."""
    from bot.mail.personal_slots import templates_allow_splicing
    from bot.mail.render import Renderer

    templates = tmp_path / "templates"
    shutil.copytree(ROOT / "templates", templates)
    probe = templates / "probe.html.j2"
    probe.write_text("before {{ subscriber_email }}")
    first = Renderer(templates, search_url="x")
    assert first.env.get_template(probe.name).render(subscriber_email="a@b.org") == "before a@b.org"
    assert templates_allow_splicing(first)
    probe.write_text("after{% if subscriber_email.endswith('.org') %} {{ subscriber_email }}{% endif %}")
    second = Renderer(templates, search_url="x")
    assert second.env.get_template(probe.name).render(subscriber_email="a@b.org") == "after a@b.org"
    assert not templates_allow_splicing(second)


def test_only_a_footer_that_prints_personal_values_is_spliced(tmp_path: Path) -> None:
    from bot.mail.personal_slots import footer_allows_substitution, templates_allow_splicing
    from bot.mail.render import Renderer

    assert footer_allows_substitution(Renderer(ROOT / "templates", search_url="x"))
    wrapping = Renderer(_wrapping_templates(tmp_path), search_url="x")
    assert templates_allow_splicing(wrapping) and not footer_allows_substitution(wrapping)


_names = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
    st.from_regex(r"[A-Za-z0-9]{1,8}( [A-Za-z0-9]{1,8}){0,3}", fullmatch=True),  # the fast forms
)
_local = st.text("abcXYZ019._+-&'", min_size=1, max_size=64).filter(
    lambda s: not s.startswith(".") and not s.endswith(".") and ".." not in s
)


@given(name=_names, local=_local, domain=st.sampled_from(["example.org", "a-b.example.co.uk", "xn--bcher-kva.example"]))
def test_to_line_is_what_the_email_package_writes(name: str, local: str, domain: str) -> None:
    from email.headerregistry import Address

    from bot.domain.text import one_line

    address = f"{local}@{domain}"
    assert to_line(name, address) == folded("To", Address(display_name=one_line(name), addr_spec=address))


@given(
    value=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=1200),
    ident=st.integers(1, 10**15),
    domain=st.sampled_from(["bot.example", "xn--bcher-kva.example", "a-b.c.example"]),
)
def test_plain_header_lines_are_what_the_email_package_writes(value: str, ident: int, domain: str) -> None:
    for name, text in (
        ("List-Unsubscribe", value),
        ("Message-ID", f"<digest.{ident}.{ident:012x}@{domain}>"),
    ):
        assert plain_line(name, text) == POLICY.fold_binary(*POLICY.header_store_parse(name, text)), name


_HEADERS = Headers(
    to_name="Ada",
    to_address="ada@example.org",
    message_id="<m@example.org>",
    date=datetime(2026, 1, 2, tzinfo=UTC),
    list_unsubscribe=("https://x.example/u/t",),
)


@given(
    text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=400)
    | st.lists(
        st.sampled_from(["", " ", "=", ".", "\t", "a" * 75, "\u00e9" * 30, "\r", "\n", "\r\n", "\x85", "\x0c"])
    ).map("".join),
    subtype=st.sampled_from(["plain", "html"]),
)
def test_parts_from_cached_lines_are_what_the_email_package_writes(text: str, subtype: str) -> None:
    from email.message import EmailMessage

    from bot.mail.message import PART_POLICY
    from bot.mail.qp import text_part

    ours, theirs = EmailMessage(policy=PART_POLICY), EmailMessage(policy=PART_POLICY)
    ours.set_content(text, subtype=subtype, charset="utf-8", cte="quoted-printable", content_manager=text_part)
    theirs.set_content(text, subtype=subtype, charset="utf-8", cte="quoted-printable")
    assert ours.as_bytes(policy=POLICY) == theirs.as_bytes(policy=POLICY)
    whole = build_message(RenderedDigest(subject=text[:50], text=text, html=text), _HEADERS, SenderConfig())
    whole.preamble = text.encode("ascii", "ignore").decode()  # through the same line writer, "\r" and all
    assert message_bytes(whole) == whole.as_bytes()


_INLINER = css_inline.CSSInliner(keep_style_tags=False, load_remote_stylesheets=False, extra_css="p { color: red }")


@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30))
def test_html_escape_is_what_the_inliner_writes(value: str) -> None:
    document = f'<html><body><p>x{escape(value)}x</p><a href="y{escape(value)}y">z</a></body></html>'
    inlined = _INLINER.inline(document)
    assert f"x{html_escape(value, attribute=False)}x" in inlined
    assert f'href="y{html_escape(value, attribute=True)}y"' in inlined


_lines = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")), max_size=30)


@given(first=_lines, second=_lines, shared=_lines, tail=st.binary(max_size=5))
def test_the_chunk_pool_gives_back_the_bytes_and_holds_shared_lines_once(
    first: list[bytes], second: list[bytes], shared: list[bytes], tail: bytes
) -> None:
    pool = ChunkPool()
    one = b"".join(line + b"\r\n" for line in first + shared)
    two = b"".join(line + b"\r\n" for line in second + shared) + tail
    chunks_one, chunks_two = pool.intern(one), pool.intern(two)
    assert b"".join(chunks_one) == one and b"".join(chunks_two) == two
    assert pool.nbytes <= len(one) + len(two)
    # A run of lines is cut the same way wherever it starts: after the first cut
    # inside the shared lines, both hold the very same chunk objects.
    cut = next((n for n, line in enumerate(shared) if zlib.crc32(line) & 1 == 0), None)
    if cut is not None and not tail:
        suffix = b"".join(line + b"\r\n" for line in shared[cut + 1 :])
        count = covered = 0
        while covered < len(suffix):
            count += 1
            covered += len(chunks_one[-count])
        assert covered == len(suffix)
        assert [id(c) for c in chunks_one[len(chunks_one) - count :]] == [
            id(c) for c in chunks_two[len(chunks_two) - count :]
        ]
        assert pool.nbytes <= len(one) + len(two) - len(suffix)
    pool.release(chunks_one)
    assert b"".join(chunks_two) == two and pool.nbytes <= len(two)
    pool.release(chunks_two)
    assert pool.nbytes == 0 and len(pool) == 0


def test_a_template_dropped_from_the_cache_still_fills(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    settings = _settings(tmp_path, public_url="https://digest.example.org")
    ids = _queued(factory, settings, seed_files)
    mailer = Mailer(Parts(settings))
    mailer.TEMPLATE_BYTES = 1  # every template is evicted as soon as it is made
    now = DAY + timedelta(minutes=3)
    with factory() as session:
        rows = [get_digest(session, i) for i in ids]
        built = mailer.build(session, rows, now)
        simple = [mailer.message_bytes(session, row, now)[0] for row in rows]
    assert mailer.spliced == len(ids) and not mailer.templates
    assert mailer.chunks.nbytes == 0 and len(mailer.chunks) == 0
    assert [b.data for b in built] == simple


@pytest.mark.parametrize("footer", ["shipped", "wrapping"])
def test_filling_a_template_for_any_subscriber_matches_the_simple_path(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path], footer: str
) -> None:
    templates = ROOT / "templates" if footer == "shipped" else _wrapping_templates(tmp_path)
    settings = _settings(tmp_path, public_url="https://digest.example.org", templates=templates)
    ids = _queued(factory, settings, seed_files)
    mailer = Mailer(Parts(settings))
    with factory() as session:
        content = digest_content(session, ids[0])
    template = MessageTemplate.build(
        mailer.renderer, content, settings.sender, mailer.links_for_token, footer_substituted=mailer.footer_substituted
    )
    assert template is not None
    # Made per subscriber: 4 header lines; in the HTML, the footer's 2 lines, the
    # "view in your browser" line, each "read the whole summary" link and each
    # entry's "more like this" line; in the text part, each entry's two lines of
    # those links, and from the shipped text footer, only its 4 lines with the
    # address or a link (a footer that wraps them is rendered whole, its list of
    # links included).
    html = mailer.renderer.render(content, mailer.links_for_token("t")[0]).html
    readmore, rate = html.count('class="readmore"'), html.count('<p class="rate"')
    assert readmore > 0 and rate == len(content.items)
    per_subscriber = [getattr(p, "__qualname__", type(p).__qualname__) for p in template.wire_pieces if callable(p)]
    footer_lines = "text_pieces.<locals>.footer_lines"
    assert len(per_subscriber) == (11 if footer == "shipped" else 8) + readmore + 3 * rate, per_subscriber
    assert (footer_lines in per_subscriber) is (footer == "wrapping")

    @given(
        name=_names,
        local=_local,
        secret=st.text("0123456789abcdef", min_size=8, max_size=32),
        ident=st.integers(1, 10**12),
    )
    def check(name: str, local: str, secret: str, ident: int) -> None:
        from dataclasses import replace

        from bot.mail.message import Headers, build_message
        from bot.tokens import make_token

        subscriber = replace(
            content.subscriber, id=ident, name=name, email=f"{local}@example.org", unsubscribe_secret=secret
        )
        token = make_token(mailer.key, ident, secret)
        links, unsubscribe = mailer.links_for_token(token)
        rendered = mailer.renderer.render(replace(content, subscriber=subscriber), links)
        simple = build_message(
            rendered, Headers(name, subscriber.email, "<m.1@bot.example>", DAY, unsubscribe), settings.sender
        ).as_bytes()
        personal = RecipientValues(subscriber.email, name, subscriber.email, token, "<m.1@bot.example>", DAY)
        assert template.fill(personal) == simple
        assert template.fill_wire(personal) == prepared(simple)  # the token lines laid out per token length

    check()


def test_an_entry_changed_during_a_delivery_run_is_read_again(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """Entries are kept from batch to batch of one run (ContentCache); an ingest that
    changes one in between must show in the batches after it: a digest planned
    before the change keeps its pinned summary, one planned after gets the new one,
    each exactly as the simple path builds it."""
    from datetime import date

    from bot.ingest.storing import ingest_bytes

    settings = _settings(tmp_path)
    papers = [
        (f"Sparse attention kernels part {n}", ["A. Author"], date(2026, 6, 13), f"First text {n}.") for n in range(3)
    ]
    save(factory, settings, [clean_fields("ada@example.org", filter="*")], DAY - timedelta(days=1))
    ingest_bytes(factory, render_dump(papers).encode(), name="one", now=DAY - timedelta(hours=2), rules=RULES)
    (before,) = plan(factory, settings, RULES, now=DAY, all_due=True).planned
    mailer = Mailer(Parts(settings))
    mailer.new_run()
    with factory() as session:
        first = mailer.build(session, [get_digest(session, before)], DAY)
    assert b"First text 0." in first[0].data

    changed = [(title, authors, day, summary.replace("First", "Second")) for title, authors, day, summary in papers]
    ingest_bytes(factory, render_dump(changed).encode(), name="two", now=DAY + timedelta(hours=1), rules=RULES)
    save(factory, settings, [clean_fields("grace@example.org", filter="*")], DAY + timedelta(hours=1))
    (after,) = plan(factory, settings, RULES, now=DAY + timedelta(hours=2), all_due=True).planned
    with factory() as session:  # the same run: the entries read for the first batch are cached
        rows = [get_digest(session, before), get_digest(session, after)]
        built = mailer.build(session, rows, DAY)
        simple = [mailer.message_bytes(session, row, DAY)[0] for row in rows]
    assert [b.data for b in built] == simple
    assert b"First text 0." in simple[0] and b"Second text 0." in simple[1]


def test_body_keys_name_the_items_and_spare_reading_them_again(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    """The planner's body key is the hash of exactly the items the send path reads for
    it, and they are the entries the digest claims; digests that share a key share one read,
    and build the same bytes."""
    from sqlalchemy import select

    from bot.store.contents import ContentCache, digest_contents
    from bot.store.ledger import ItemRow, body_key
    from bot.store.schema import BodyItem, Digest
    from tests.helpers import digest_entry_ids

    settings = _settings(tmp_path)
    ids = _queued(factory, settings, seed_files)
    with factory() as session:
        keys = dict(session.execute(select(Digest.id, Digest.body_key).where(Digest.id.in_(ids))).all())
        for digest_id in ids:
            stored = session.execute(
                select(
                    BodyItem.entry_id,
                    BodyItem.summary_source_id,
                    BodyItem.why,
                    BodyItem.tags,
                    BodyItem.url,
                    BodyItem.taste,
                    BodyItem.section,
                )
                .where(BodyItem.body_key == keys[digest_id])
                .order_by(BodyItem.position)
            ).all()
            rows: list[ItemRow] = [(e, s, w, tuple(t), u, x, n) for e, s, w, t, u, x, n in stored]
            # A body of one interest (no section) is keyed as it was before sections.
            assert rows and keys[digest_id] == body_key(row if row[6] else row[:6] for row in rows)
            assert digest_entry_ids(session, digest_id) == [row[0] for row in rows]
        assert len(set(keys.values())) == 4  # one per filter
        cache = ContentCache()
        first = digest_contents(session, ids[:3], cache)  # three of the "*" subscribers
        assert len(cache.bodies) == 1
        later = digest_contents(session, ids, cache)
        fresh = digest_contents(session, ids)
    assert len(cache.bodies) == 4
    assert first[ids[0]].items is not None and first[ids[0]].items == later[ids[1]].items
    for digest_id in ids:
        assert later[digest_id] == fresh[digest_id]


def test_a_released_digest_does_not_lend_its_empty_rows_to_its_body(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    """A cancel releases a digest's claims (its body key); read in one batch
    with another digest of the same body, in whatever order the database returns
    them, neither lends the other its rows."""
    from bot.store.contents import ContentCache, digest_contents
    from bot.store.engine import transaction
    from bot.store.ledger import release_entries

    settings = _settings(tmp_path)
    ids = _queued(factory, settings, seed_files)
    with transaction(factory) as session:  # what delivery does for a subscriber who left
        release_entries(session, ids[0])
    with factory() as session:
        cache = ContentCache()
        contents = digest_contents(session, ids[:2], cache)
        fresh = digest_contents(session, [ids[1]])
    assert contents[ids[0]].items == ()
    assert contents[ids[1]].items and contents[ids[1]] == fresh[ids[1]]


def test_a_token_line_is_filled_as_encoding_it_would_at_every_soft_break() -> None:
    """``TokenLine`` puts a token's characters where one encoding of the line shows
    them: checked against encoding the line itself, with the token at every offset
    around the soft line breaks, twice in a line, for tokens of several lengths."""
    from bot.mail.personal_slots import TokenLine
    from bot.mail.qp import qp_lines
    from bot.mail.render import Links
    from bot.mail.splice import MessageTemplate, RecipientValues

    links = Links("u", None)
    for length in (5, 30, 31, 90):
        token = ("7." + "aB_-x" * 20)[:length]
        dotted = "." * (length // 2) + "ab." * length  # a dot wherever a soft break may put it first on a line
        for offset in range(0, 170, 3):
            segments = (b"=" * (offset % 7) + b"a" * offset + b"<a href=/d/", "token", b"/more> &nbsp;", "token", b" ")
            line = TokenLine(segments)
            for value in (token, dotted[:length]):
                personal = RecipientValues("e", "", "e@x.org", value, "<m@x>", datetime(2026, 1, 1, tzinfo=UTC))
                whole = b"".join(value.encode() if s == "token" else s for s in segments)  # type: ignore[misc]
                assert line(personal, links) == qp_lines(whole), (length, offset)
                # and as DATA carries it, dot-stuffed, from the layout compiled for its length
                template = MessageTemplate([b".X\r\n", line, b"..Y\r\n"], lambda _: (links, ()))
                assert template.fill_wire(personal) == prepared(template.fill(personal)), (length, offset, value)
