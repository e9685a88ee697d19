"""The digest as a reader sees it: real sources shown right, short summaries, marks,
contents, links, and the size budget that keeps Gmail from clipping a message."""

from __future__ import annotations

import asyncio
import html as html_lib
import re
from datetime import UTC, date, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pydantic import SecretStr
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings, WebConfig
from bot.delivery.loop import deliver_now
from bot.domain import DigestItem, EntryKind
from bot.domain.links import primary_url, side_links
from bot.ingest.storing import ingest_bytes, ingest_file
from bot.mail.bibtex import bibtex_of
from bot.mail.framing import filter_marks
from bot.mail.parts import Parts
from bot.mail.prose import cut_at_sentence, latex_to_text, marks_pattern, summary_of, title_text
from bot.mail.render import HTML_BUDGET
from bot.plan import plan, resend
from bot.plan.next_digest import outlook, outlook_note
from bot.plan.revisions import PER_DIGEST, to_tell
from bot.store.digests import list_digests
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save, set_setting
from bot.tokens import make_token, signing_key
from bot.tools.sink import Sink
from bot.web import create_app
from bot.web.forms import form_token
from tests.conftest import ROOT, SEEDS
from tests.helpers import Server, digest_item, render_dump, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 15, 12, tzinfo=UTC)
FIXTURES = Path(__file__).parent / "fixtures"
SEARCH = "https://arxiv.org/search/?query={title}&searchtype=title"


def _settings(tmp_path: Path, sink: Sink, **digest: object) -> Settings:
    return settings_for(
        tmp_path,
        smtp={"port": sink.port, "timeout_seconds": 5},
        sender={"from_address": "digest@bot.example", "from_name": "Research Digest"},
        digest=digest,
    )


def _deliver(factory: sessionmaker[Session], settings: Settings, sink: Sink, *filters: str) -> list[EmailMessage]:
    people = [clean_fields(f"r{n}@example.org", filter=f) for n, f in enumerate(filters)]
    save(factory, settings, people, DAY - timedelta(days=2))
    plan(factory, settings, RULES, now=DAY, all_due=True)
    before = len(sink.received)
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY))
    parser = BytesParser(policy=policy.default)
    messages = [parser.parsebytes(r.data) for r in sink.received[before:]]
    return [m for m in messages if isinstance(m, EmailMessage)]


def _parts(message: EmailMessage) -> tuple[str, str]:
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    return text.get_content(), html.get_content()


def _item(summary: str, *, title: str = "A paper", summary_type: str = "text/plain", **fields: object) -> DigestItem:
    values: dict[str, object] = {
        "key": "k",
        "kind": EntryKind.PAPER,
        "title": title,
        "authors": ("Ada Lovelace",),
        "published": date(2026, 6, 14),
        "summary": summary,
        "summary_type": summary_type,
        "tags": (),
        "why": "matches everything",
        "arxiv_id": None,
        "doi": None,
        "links": (),
    }
    values.update(fields)
    return digest_item(**values)


# --- LaTeX and HTML, wherever they occur -------------------------------------------


@pytest.mark.parametrize(
    ("latex", "shown"),
    [
        ("$150~\\mu s$", "150 μs"),
        ("$149~μs$", "149 μs"),
        ("$3.2\\times$ faster", "3.2× faster"),
        ("$O(n \\log n)$", "O(n log n)"),
        ("an $\\alpha$-stable law", "an α-stable law"),
        ("$\\times 3$", "× 3"),
        ("67.2% and 5 & 6 at https://x.example/a_b$c", "67.2% and 5 & 6 at https://x.example/a_b$c"),
    ],
)
def test_latex_reads_as_text(latex: str, shown: str) -> None:
    assert latex_to_text(latex) == shown


def test_latex_in_an_html_summary_is_converted_between_tags_only() -> None:
    summary = (
        '<p>Cuts memory by $2.5\\times$ at <a href="https://x.example/$2.5\\times$">the $\\mu$ site</a>'
        " in $150~\\mu s$.</p>"
    )
    shown = summary_of(_item(summary, summary_type="text/html").content, 0)
    assert "2.5×" in shown.html and "150 μs" in shown.html and "the μ site" in shown.html
    assert 'href="https://x.example/$2.5\\times$"' in shown.html  # attributes untouched
    assert "2.5×" in shown.text and "150 μs" in shown.text and "\\times" not in shown.text


def test_titles_are_text_with_their_latex_converted() -> None:
    assert title_text("Speeding up $O(n \\log n)$ sorts by $3.2\\times$") == "Speeding up O(n log n) sorts by 3.2×"


def test_real_arxiv_and_atom_feeds_show_right(factory: sessionmaker[Session], tmp_path: Path, sink: Sink) -> None:
    rss = (FIXTURES / "arxiv_day1.rss").read_text(encoding="utf-8")
    # arXiv's own shape: LaTeX in the title and in the (typed HTML) description.
    latex_item = """<item>
      <title>Sorting in $O(n \\log n)$ at $3.2\\times$ the speed</title>
      <link>https://arxiv.org/abs/2606.09999</link>
      <description>arXiv:2606.09999v1 Announce Type: new
Abstract: A sort that runs in $150~\\mu s$ and reaches $2.5\\times$ on GPUs.</description>
      <guid isPermaLink="false">oai:arXiv.org:2606.09999v1</guid>
      <category>cs.DC</category>
      <dc:creator>Ada Lovelace</dc:creator>
    </item>
    <item>"""
    rss = rss.replace("<item>", latex_item, 1)
    settings = _settings(tmp_path, sink)
    for name, data in (("arxiv.rss", rss.encode()), ("journal.atom", (FIXTURES / "journal.atom").read_bytes())):
        assert ingest_bytes(factory, data, name=name, now=DAY, rules=RULES).status.value == "ingested"
    (message,) = _deliver(factory, settings, sink, "*")
    text, html = _parts(message)
    flat_text, flat_html = " ".join(text.split()), " ".join(html.split())
    for shown in ("Sorting in O(n log n) at 3.2× the speed", "150 μs", "2.5×"):
        assert shown in flat_text, shown
        assert shown in flat_html, shown
    assert "\\times" not in text + html and "\\log" not in text + html and "$" not in text
    # Atom type="html" title: its words, not its tags.
    assert "Scheduling MoE Experts Across Pods" in flat_text and "Scheduling MoE Experts Across Pods" in flat_html
    assert "&lt;i&gt;" not in html and "<i>" not in text
    # The title goes to the paper; its PDF is one click away.
    assert '<a href="https://arxiv.org/abs/2606.09999"' in html
    assert 'href="https://arxiv.org/pdf/2606.09999"' in html and "PDF: https://arxiv.org/pdf/2606.09999" in text


# --- links -------------------------------------------------------------------------


def test_a_paper_title_links_to_the_paper_and_its_code_gets_its_own_link() -> None:
    summary = (
        "We release models at https://huggingface.co/collections/org/models and code at https://github.com/org/repo."
    )
    paper = _item(summary, title="A Model", links=("https://huggingface.co/collections/org/models",))
    assert primary_url(paper.content, SEARCH) == SEARCH.format(title="A+Model")  # not the model collection
    assert side_links(paper.content) == (
        ("Code", "https://github.com/org/repo"),
        ("Model", "https://huggingface.co/collections/org/models"),
    )
    arxiv = _item("x", arxiv_id="2606.01234", links=("https://arxiv.org/abs/2606.01234",))
    assert primary_url(arxiv.content, SEARCH) == "https://arxiv.org/abs/2606.01234"
    assert side_links(arxiv.content) == (("PDF", "https://arxiv.org/pdf/2606.01234"),)
    # A feed's own link for a paper with no id, named as a "Read more" in its HTML: the title's.
    feed = _item('<p>x <a href="https://blog.example/post">Read more</a></p>', summary_type="text/html")
    feed = _item(feed.content.summary, summary_type="text/html", links=("https://blog.example/post",))
    assert primary_url(feed.content, SEARCH) == "https://blog.example/post"


def test_seed_repositories_show_their_description_and_papers_their_code(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, now=DAY - timedelta(hours=1), rules=RULES)
    settings = _settings(tmp_path, sink, max_entries=1000)
    (message,) = _deliver(factory, settings, sink, '"kv cache"')
    text, html = _parts(message)
    description = "LMCache: Supercharge Your LLM with the Fastest KV Cache Layer"
    assert description in " ".join(text.split())
    assert re.search(r'<p class="description"[^>]*>LMCache: Supercharge Your LLM with the Fastest <mark', html)


# --- summaries in proportion -------------------------------------------------------


def test_a_long_abstract_is_cut_at_a_sentence_and_links_to_the_rest() -> None:
    sentence = "This sentence has exactly sixty characters in it, you see. "
    abstract = sentence * 20
    short = cut_at_sentence(abstract, 400)
    assert short is not None and short.endswith("you see.") and 300 <= len(short) <= 500
    assert cut_at_sentence(sentence * 6, 400) is None  # a quarter over: shown whole
    one_long = "word " * 400
    cut = cut_at_sentence(one_long, 400)
    assert cut is not None and cut.endswith(" …") and len(cut) <= 402
    shown = summary_of(_item(abstract).content, 400)
    assert shown.cut and shown.text == short


@hsettings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab .!?A1\n\"'("), max_size=3000), st.integers(0, 1000))
def test_a_cut_summary_is_a_prefix_near_the_limit(text: str, limit: int) -> None:
    cut = cut_at_sentence(text, limit)
    if cut is None:
        assert limit <= 0 or len(text) <= limit + limit // 4
        return
    body = cut.removesuffix(" …")
    assert text.startswith(body)
    assert len(body) <= limit + limit // 4


# --- marks -------------------------------------------------------------------------


def test_the_filters_words_are_marked_in_html_only_never_inside_a_tag() -> None:
    marks = filter_marks('"kv cache" or (gpu and not fpga)')
    assert marks is not None
    summary = '<p>A KV-cache for GPUs on an FPGA, see <a href="https://x.example/kv-cache">kv cache docs</a>.</p>'
    shown = summary_of(_item(summary, summary_type="text/html").content, 0, marks)
    assert "<mark>KV-cache</mark>" in shown.html and "<mark>kv cache</mark> docs" in shown.html
    assert 'href="https://x.example/kv-cache"' in shown.html
    assert "FPGA" in shown.html and "<mark>FPGA</mark>" not in shown.html  # under a "not"
    assert "GPUs" in shown.html and "<mark>GPUs</mark>" not in shown.html  # a tag name is a whole word
    assert "<mark>" not in shown.text
    assert marks_pattern(()) is None and filter_marks("*") is None
    # A tag's rule keywords are marked where the filter names the tag.
    keywords = (("gpu", ("CUDA", "tensor core")), ("fpga", ("Verilog",)))
    with_rules = filter_marks("gpu and not fpga", keywords)
    assert with_rules is not None
    shown = summary_of(_item("CUDA tensor-cores and tensor core kernels in Verilog on a GPU.").content, 0, with_rules)
    assert "<mark>CUDA</mark>" in shown.html and "<mark>tensor core</mark>" in shown.html
    assert "<mark>GPU</mark>" in shown.html and "<mark>Verilog</mark>" not in shown.html


# --- layout, dark mode, and the size budget -----------------------------------------


def test_contents_preheader_and_dark_mode(factory: sessionmaker[Session], tmp_path: Path, sink: Sink) -> None:
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, now=DAY - timedelta(hours=1), rules=RULES)
    grouping = '"sparse attention" or snn or fpga or "kv cache"'
    messages = _deliver(factory, _settings(tmp_path, sink), sink, "*", grouping)
    for message in messages:
        text, html = _parts(message)
        titles = re.findall(r'<div class="entry" id="e(\d+)"', html)
        assert len(titles) >= 3
        for ref in titles:  # the contents link every entry
            assert f'href="#e{ref}"' in html
        first = re.search(r"<h2[^>]*><a[^>]*>(.*?)</a>", html, re.S)
        assert first is not None
        preheader = re.search(r'<p class="preheader"[^>]*>(.*?)</p>', html, re.S)
        assert preheader is not None and re.sub(r"<[^>]*>", "", first.group(1))[:40] in preheader.group(1)
        assert '<html lang="en">' in html and '<meta name="color-scheme" content="light dark">' in html
        assert "prefers-color-scheme: dark" in html
        assert all(len(line) <= 78 or "://" in line for line in text.splitlines())
    (filtered,) = [m for m in messages if m["To"].addresses[0].addr_spec == "r1@example.org"]
    grouped = filtered.get_body(("html",))
    assert grouped is not None
    labels = re.findall(r'<p class="group"[^>]*>(.*?)</p>', grouped.get_content())
    assert len(labels) >= 2 and len(set(labels)) == len(labels)


def _worst_case_rss(count: int) -> bytes:
    """*count* arXiv-like items at their worst: 300-character titles with LaTeX, 60
    authors, 15 categories, one-line 5,000-character HTML abstracts full of links."""
    items = []
    for n in range(count):
        title = f"Paper {n}: " + "Scaling $O(n \\log n)$ attention kernels " * 7
        words = " ".join(f"word{n}x{i} https://example.org/{n}/{i}/" + "a" * 40 for i in range(60))
        abstract = f"&lt;p&gt;{words} $2.5\\times$ " + "x" * (5000 - len(words)) + "&lt;/p&gt;"
        categories = "".join(f"<category>cs.C{c}</category>" for c in range(15))
        authors = ", ".join(f"Author Number{a} Withalongsurname" for a in range(60))
        items.append(
            f"<item><title>{title}</title><link>https://arxiv.org/abs/2606.{n:05d}</link>"
            f"<description>arXiv:2606.{n:05d}v1 Announce Type: new\nAbstract: {abstract}</description>"
            f"<guid>oai:arXiv.org:2606.{n:05d}v1</guid>{categories}<dc:creator>{authors}</dc:creator></item>"
        )
    return (
        '<?xml version="1.0"?><rss version="2.0" xmlns:dc="http://purl.org/dc/elements/1.1/"><channel>'
        "<title>worst</title>" + "".join(items) + "</channel></rss>"
    ).encode()


@pytest.mark.parametrize("public_url", ["", "https://digest.example.org"])
@pytest.mark.parametrize("summary_chars", [400, 0])
def test_every_message_stays_under_the_clipping_size(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink, summary_chars: int, public_url: str
) -> None:
    """With a public URL every entry links its web version and "more / less like this",
    each link carrying the subscriber's token: those count too."""
    data = _worst_case_rss(40)
    assert ingest_bytes(factory, data, name="worst.rss", now=DAY, rules=RULES).status.value == "ingested"
    long_dump = render_dump(
        [
            (f"Dump paper {n} " + "on long titles " * 15, ["A. Author"] * 40, date(2026, 6, 14), "Long. " * 900)
            for n in range(10)
        ]
    )
    assert ingest_bytes(factory, long_dump.encode(), name="long.txt", now=DAY, rules=RULES).status.value == "ingested"
    settings = _settings(tmp_path, sink, max_entries=30, summary_chars=summary_chars)
    if public_url:
        web = WebConfig(public_url=public_url, signing_key=SecretStr("k" * 32))
        settings = settings.model_copy(update={"web": web})
    (message,) = _deliver(factory, settings, sink, "*")
    raw = sink.received[-1].data
    text, html = _parts(message)
    assert len(html.encode()) <= HTML_BUDGET, len(html.encode())
    assert len(raw) <= 200_000, len(raw)
    # Every entry is there, the late ones compact (title and byline), none cut off ...
    assert html.count('class="entry"') == 30 and len(re.findall(r"^\[\d+\] (?!https?:)\S", text, re.M)) == 30
    # ... and the footer with the unsubscribe link survives.
    assert "Unsubscribe" in html[-3000:]
    if summary_chars == 0:
        assert html.count('class="summary"') < 30  # whole abstracts do not all fit
    if public_url:
        assert html.count('<p class="rate"') == html.count('class="summary"') > 0


# --- quiet days: "no email today: why?" ---------------------------------------------


def test_the_preview_and_the_manage_page_say_why_a_day_is_quiet(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    settings = _settings(tmp_path, sink).model_copy(
        update={"web": WebConfig(public_url="https://digest.example.org", signing_key=SecretStr("k" * 32))}
    )
    people = [clean_fields("quiet@example.org", filter='"quantum gravity"'), clean_fields("all@example.org")]
    save(factory, settings, people, DAY - timedelta(days=2))
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, now=DAY - timedelta(hours=1), rules=RULES)
    with factory() as session:
        quiet, everyone = (get_subscriber(session, e) for e in ("quiet@example.org", "all@example.org"))
        assert quiet is not None and everyone is not None
        nothing_matches = outlook(session, quiet, RULES, as_of=DAY)
        waiting = outlook(session, everyone, RULES, as_of=DAY)
        before_anything = outlook(session, quiet, RULES, as_of=DAY - timedelta(days=1))
    assert nothing_matches.matching == 0 and nothing_matches.unseen == waiting.unseen > 0
    note = outlook_note(nothing_matches)
    waiting_words = f"{waiting.unseen} entries you were not sent arrived since "
    assert note.startswith(f"Nothing for your next digest yet: {waiting_words}")
    assert "none matches your filter. Their tags: " in note and "llm (" in note
    assert waiting.matching == waiting.unseen and "go out in your next digest" in outlook_note(waiting)
    assert before_anything.unseen == 0 and "nothing new has arrived" in outlook_note(before_anything)
    # A reader of the feed only is told of their feed, never of mail.
    assert outlook_note(before_anything, mailed=False).startswith("Nothing new for your feed: nothing new has arrived")
    assert "go into your feed with your next digest" in outlook_note(waiting, mailed=False)
    assert "email" not in outlook_note(nothing_matches, mailed=False).casefold()

    key = signing_key(settings)
    with Server(create_app(settings, factory, clock=lambda: DAY)) as client:
        page = client.get(f"/m/{make_token(key, quiet.id, quiet.unsubscribe_secret)}")
        assert page.status_code == 200 and "none matches your filter" in page.text
        page = client.get(f"/m/{make_token(key, everyone.id, everyone.unsubscribe_secret)}")
        assert "go out in your next digest" in page.text


# --- the web version and BibTeX ----------------------------------------------------


def test_the_web_version_shows_every_summary_whole_and_exports_bibtex(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    settings = _settings(tmp_path, sink).model_copy(
        update={"web": WebConfig(public_url="https://digest.example.org", signing_key=SecretStr("k" * 32))}
    )
    rss = (FIXTURES / "arxiv_day1.rss").read_bytes()
    assert ingest_bytes(factory, rss, name="arxiv.rss", now=DAY, rules=RULES).status.value == "ingested"
    long_abstract = "First sentence of a long abstract. " + "Middle sentence. " * 60 + "The very last sentence."
    dump = render_dump([("A paper with a long abstract", ["Ada Lovelace"], date(2026, 6, 14), long_abstract)])
    assert ingest_bytes(factory, dump.encode(), name="long.txt", now=DAY, rules=RULES).status.value == "ingested"
    (message,) = _deliver(factory, settings, sink, "*")
    text, html = _parts(message)
    assert "The very last sentence." not in html  # cut in the message ...
    browser = re.search(r'<a href="https://digest\.example\.org(/d/[^"]+/2026-06-15)"[^>]*>View in your browser', html)
    assert browser is not None and f"https://digest.example.org{browser.group(1)}" in text
    readmore = re.findall(r'class="readmore"[^>]*><a href="https://digest\.example\.org(/d/[^"#]+)#e(\d+)"', html)
    assert readmore and all(path == browser.group(1) for path, _ in readmore)
    with Server(create_app(settings, factory, clock=lambda: DAY)) as client:
        page = client.get(browser.group(1))
        assert page.status_code == 200 and "The very last sentence." in page.text  # ... whole on the web
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        assert 'class="readmore"' not in page.text and "View in your browser" not in page.text
        everything = client.get(browser.group(1) + ".bib")
        assert everything.status_code == 200 and everything.headers["content-type"].startswith("application/x-bibtex")
        entries = re.findall(r"^@(\w+)\{([^,]+),$", everything.text, re.M)
        assert len(entries) == html.count('class="entry"') == 4
        assert "eprint = {2606.01234}" in everything.text and "archiveprefix = {arXiv}" in everything.text
        one = client.get(browser.group(1) + "/1.bib")
        assert one.status_code == 200 and one.text.count("@") == 1 and one.text in everything.text
        token_path = browser.group(1).rsplit("/", 1)[0]
        forged = token_path[:-1] + ("A" if not token_path.endswith("A") else "B")
        for wrong in (
            f"{token_path}/2026-06-14",
            f"{token_path}/2026-13-45",
            f"{token_path}/2026-06-15/0.bib",
            f"{token_path}/2026-06-15/5.bib",
            f"{token_path}/2026-06-15.bib/1.bib",
            f"{token_path}/2026-06-15.html",
            f"{forged}/2026-06-15",
        ):
            assert client.get(wrong).status_code == 404, wrong


def test_the_web_version_and_a_resend_show_the_filter_the_digest_was_sent_with(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    settings = _settings(tmp_path, sink).model_copy(
        update={"web": WebConfig(public_url="https://digest.example.org", signing_key=SecretStr("k" * 32))}
    )
    for path in sorted(SEEDS.glob("*.txt")):
        ingest_file(factory, path, now=DAY - timedelta(hours=1), rules=RULES)
    (message,) = _deliver(factory, settings, sink, "gpu or snn")
    _, html = _parts(message)
    shows = re.compile(r'class="filter"[^>]*>gpu or snn</span>')
    assert shows.search(html)
    browser = re.search(r'<a href="https://digest\.example\.org(/d/[^"]+/2026-06-15)"', html)
    assert browser is not None
    # The reader changes their filter afterwards, typing the parentheses.
    save(factory, settings, [clean_fields("r0@example.org", filter='(gpu and llm) or snn or "kv cache"')], DAY)
    with factory() as session:
        reader = get_subscriber(session, "r0@example.org")
        assert reader is not None and reader.filter == '(gpu and llm) or snn or "kv cache"'
        (sent,) = list_digests(session, subscriber_id=reader.id)
    with Server(create_app(settings, factory, clock=lambda: DAY)) as client:
        page = client.get(browser.group(1)).text
        assert shows.search(page) and "kv cache" not in page
        manage = client.get(f"/m/{make_token(b'k' * 32, reader.id, reader.unsubscribe_secret)}").text
        assert 'value="(gpu and llm) or snn or &#34;kv cache&#34;"' in manage
    resend(factory, settings, sent.id, now=DAY + timedelta(hours=1))
    before = len(sink.received)
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY + timedelta(hours=1)))
    (copy,) = [BytesParser(policy=policy.default).parsebytes(r.data) for r in sink.received[before:]]
    assert isinstance(copy, EmailMessage)
    assert shows.search(_parts(copy)[1])


def test_a_filter_reads_with_parentheses_around_each_and_group() -> None:
    from bot.choose.filters import normalize_filter, parse_filter, shown_filter

    assert normalize_filter("(gpu and llm) or snn") == "(gpu and llm) or snn"
    assert normalize_filter("gpu and llm or snn") == "(gpu and llm) or snn"
    assert normalize_filter("gpu and (llm or snn)") == "gpu and (llm or snn)"
    assert normalize_filter("not (gpu or llm) and snn") == "not (gpu or llm) and snn"
    # Filters stored before are shown the same way; what they select is unchanged.
    assert shown_filter("gpu and llm or snn") == "(gpu and llm) or snn"
    assert parse_filter("gpu and llm or snn") == parse_filter(shown_filter("gpu and llm or snn"))


def _read_by_two_parsers(text: str) -> tuple[list[str], list[str]]:
    """The entry keys pybtex (BibTeX's own rules, strict) and bibtexparser read in *text*."""
    import bibtexparser
    from pybtex.database import parse_string

    second = bibtexparser.parse_string(text)
    assert not second.failed_blocks, [b.raw[:200] for b in second.failed_blocks]
    return list(parse_string(text, "bibtex").entries.keys()), [e.key for e in second.entries]


@hsettings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.lists(st.text(max_size=60), max_size=5), st.text(max_size=40))
def test_bibtex_is_bibtex_whatever_the_title(title: str, authors: list[str], doi: str) -> None:
    """Every braced value balanced as BibTeX counts braces (escaped ones too), and two
    parsers read every entry back: a title with "}" or "@comment{" never ends its entry
    early nor makes an entry of its own."""
    from bot.mail.bibtex import balanced

    item = _item("x", title=title or "t", authors=tuple(authors), doi=doi or None, arxiv_id="2606.01234")
    text = bibtex_of([item, item], SEARCH)
    for line in text.split("\n"):
        if line.startswith("  "):  # a field: "name = {value},"
            value = line.split(" = ", 1)[1]
            assert value.startswith("{") and value.endswith("},") and balanced(value[1:-2]), line
    first, second = _read_by_two_parsers(text)
    assert len(first) == len(second) == 2 and first == second


def test_bibtex_of_hostile_titles_reads_back_entry_for_entry() -> None:
    titles = [
        "Plain",
        "Closes } early @comment{injected, title={x}}",
        "@misc{x, title={y}}",
        "Escaped \\} and \\{ braces",
        "Unbalanced {{{",
        "Back\\slash at the end\\",
        "%comment and & and $math$",
        "Müller's naïve café",
    ]
    items = [_item("x", title=t, authors=(f"Author {n}",), arxiv_id=f"2606.{n:05d}") for n, t in enumerate(titles)]
    first, second = _read_by_two_parsers(bibtex_of(items, SEARCH))
    assert len(first) == len(second) == len(titles) and first == second
    assert not {"injected", "x"} & set(first)


def test_the_bibtex_url_is_the_paper_never_a_search() -> None:
    from bot.mail.bibtex import bibtex_entry

    on_arxiv = bibtex_entry(_item("x", title="SupraSNN", arxiv_id="2606.01234"), SEARCH)
    assert "  url = {https://arxiv.org/abs/2606.01234}," in on_arxiv
    nowhere = bibtex_entry(_item("x", title="SupraSNN", arxiv_id=None, doi=None, links=()), SEARCH)
    assert "url = " not in nowhere and "arxiv.org/search" not in nowhere
    pinned = _item("x", title="SupraSNN", arxiv_id=None, url=SEARCH.format(title="SupraSNN"))
    assert "url = " not in bibtex_entry(pinned, SEARCH)  # a search the planner pinned is no paper either


# --- changed since sent ------------------------------------------------------------


def _cycle(factory: sessionmaker[Session], settings: Settings, sink: Sink, at: datetime) -> dict[str, EmailMessage]:
    """Plan and deliver at *at*; the messages sent, by recipient."""
    plan(factory, settings, RULES, now=at, all_due=True)
    before = len(sink.received)
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: at))
    parser = BytesParser(policy=policy.default)
    found = {}
    for received in sink.received[before:]:
        message = parser.parsebytes(received.data)
        assert isinstance(message, EmailMessage)
        found[received.recipients[0]] = message
    return found


def test_an_entry_revised_since_it_was_sent_is_told_once_to_those_who_want_it(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    settings = _settings(tmp_path, sink)
    people = [clean_fields(f"{who}@example.org") for who in ("told", "optout", "late")]
    save(factory, settings, people[:2], DAY - timedelta(days=2))
    set_setting(factory, "optout@example.org", "send_updates", False, DAY - timedelta(days=2))
    assert ingest_bytes(factory, (FIXTURES / "arxiv_day1.rss").read_bytes(), name="d1", now=DAY, rules=RULES)
    day1 = _cycle(factory, settings, sink, DAY)
    assert set(day1) == {"told@example.org", "optout@example.org"}
    save(factory, settings, people[2:], DAY + timedelta(hours=2))  # joins after the first version went out

    day2_at = DAY + timedelta(days=1)
    assert ingest_bytes(factory, (FIXTURES / "arxiv_day2.rss").read_bytes(), name="d2", now=day2_at, rules=RULES)
    day2 = _cycle(factory, settings, sink, day2_at)
    text, html = _parts(day2["told@example.org"])
    new_title = "Elastic KV-Cache Offloading for Multi-Tenant LLM Serving Systems"
    note = 'title was "Elastic KV Cache Offloading for Multi-Tenant LLM Serving"; abstract revised'
    assert "Updated since we sent it" in html and "Updated since we sent it" in text
    flat_text, flat_html = " ".join(text.split()), " ".join(html.split())
    assert new_title in flat_text and note in flat_text
    assert new_title in flat_html and note in html_lib.unescape(flat_html)
    # Never the whole entry again: the revised paper is not one of the day's entries.
    assert html.count('class="entry"') == 1 and "Spiking Transformers on FPGAs" in html
    for other in ("optout@example.org", "late@example.org"):  # opted out; never had the old one
        assert "Updated since we sent it" not in _parts(day2[other])[1]

    # A resend shows what the original showed; the next digest does not tell it again.
    with factory() as session:
        told = get_subscriber(session, "told@example.org")
        assert told is not None
        (original,) = [d for d in list_digests(session, subscriber_id=told.id) if d.local_date == day2_at.date()]
    resend(factory, settings, original.id, now=day2_at + timedelta(hours=1))
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: day2_at + timedelta(hours=1)))
    copy = BytesParser(policy=policy.default).parsebytes(sink.received[-1].data)
    assert isinstance(copy, EmailMessage) and new_title in " ".join(_parts(copy)[1].split())
    day3_at = day2_at + timedelta(days=1)
    dump = render_dump([("A later paper", ["Ada Lovelace"], date(2026, 6, 16), "Something new.")])
    assert ingest_bytes(factory, dump.encode(), name="d3.txt", now=day3_at, rules=RULES)
    day3 = _cycle(factory, settings, sink, day3_at)
    assert "Updated since we sent it" not in _parts(day3["told@example.org"])[1]


def test_the_revision_rule_tells_what_changed_after_it_was_sent_or_last_told_a_few_at_a_time() -> None:
    sent_at, told_at = DAY, DAY + timedelta(days=2)
    revised = {1: DAY + timedelta(days=1), 2: DAY + timedelta(days=1), 3: DAY - timedelta(days=1)}
    revised |= {100 + i: DAY + timedelta(hours=i + 1) for i in range(PER_DIGEST + 2)}
    copies = [
        (7, 1, 50, None, sent_at),  # revised after the digest that carried it: told
        (7, 2, 50, told_at, sent_at),  # told of a later change already: not again
        (7, 3, 50, None, sent_at),  # revised before it was sent: the digest had the new one
        (8, 1, 51, None, None),  # the digest that carried it was never sent
    ] + [(9, 100 + i, 52, None, sent_at) for i in range(PER_DIGEST + 2)]
    told = to_tell(copies, revised)
    assert told[7] == [(revised[1], 1, 50)]
    assert 8 not in told
    assert [entry for _, entry, _ in told[9]] == [100 + i for i in range(PER_DIGEST)]  # oldest first, the rest wait


def test_the_manage_page_turns_the_updates_list_off_and_on(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink
) -> None:
    settings = _settings(tmp_path, sink).model_copy(
        update={"web": WebConfig(public_url="https://digest.example.org", signing_key=SecretStr("k" * 32))}
    )
    save(factory, settings, [clean_fields("reader@example.org")], DAY)
    with factory() as session:
        reader = get_subscriber(session, "reader@example.org")
    assert reader is not None and reader.send_updates
    token = make_token(signing_key(settings), reader.id, reader.unsubscribe_secret)
    form = {"form": form_token(signing_key(settings), token)}
    with Server(create_app(settings, factory, clock=lambda: DAY)) as client:
        assert "Stop listing revised entries and library news" in client.get(f"/m/{token}").text
        off = client.post(f"/m/{token}", data={**form, "action": "updates_off"})
        assert off.status_code == 200 and "List revised entries and library news again" in off.text
        with factory() as session:
            assert get_subscriber(session, "reader@example.org").send_updates is False  # type: ignore[union-attr]
        on = client.post(f"/m/{token}", data={**form, "action": "updates_on"})
        assert on.status_code == 200 and "Stop listing revised entries and library news" in on.text
