"""Daily digests end to end: plan -> render -> SMTP (aiosmtpd on 127.0.0.1) -> ledger.

A controllable clock stands in for time: no test sleeps to wait for a schedule.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, date, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.domain import DeliverReport, DigestKind, DigestState, SubscriberStatus
from bot.ingest.storing import ingest_bytes, ingest_file
from bot.mail.parts import Parts
from bot.plan import plan, resend
from bot.store.digests import list_digests
from bot.store.subscribers import get_subscriber
from bot.subscribers.csv_io import import_csv
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import change_status, save
from bot.taste.library_service import import_library
from bot.tools.sink import Fault, Received, Sink, SinkHandler
from tests.conftest import ROOT
from tests.helpers import claims, queue_digests, render_dump, settings_for
from tests.seed_facts import EXPECTED, MINIMAX

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY1 = datetime(2026, 6, 14, 12, tzinfo=UTC)
HEADERS = ("From", "To", "Subject", "Date", "Message-ID", "List-Id", "List-Unsubscribe", "Auto-Submitted")


@pytest.fixture
def settings(tmp_path: Path, sink: Sink) -> Settings:
    return settings_for(
        tmp_path,
        smtp={"port": sink.port, "timeout_seconds": 2, "retry_base_seconds": 60, "max_attempts": 4},
        sender={"from_address": "digest@bot.example", "from_name": "Research Digest"},
    )


def cycle(factory: sessionmaker[Session], settings: Settings, now: datetime, *, all_due: bool = False) -> DeliverReport:
    plan(factory, settings, RULES, now=now, all_due=all_due)
    return asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: now))


def parsed(received: Received):
    return BytesParser(policy=policy.default).parsebytes(received.data)


def titles_in(received: Received) -> set[str]:
    html = parsed(received).get_body(("html",)).get_content()
    import html as html_lib

    found = re.findall(r"<h2[^>]*><a[^>]*>(.*?)</a></h2>", html, re.S)
    return {html_lib.unescape(re.sub(r"<[^>]*>", "", t)) for t in found}  # marks dropped


def subscribe_examples(factory: sessionmaker[Session], settings: Settings) -> None:
    report = import_csv(
        factory, settings, (ROOT / "config" / "subscribers.example.csv").read_text(), DAY1 - timedelta(days=1)
    )
    assert report.errors == ()


def test_seed_replay_sends_exactly_the_expected_entries(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    subscribe_examples(factory, settings)
    for day, path in enumerate(seed_files):
        now = DAY1 + timedelta(days=day)
        before = len(sink.received)
        ingest_file(factory, path, now=now, rules=RULES)
        cycle(factory, settings, now, all_due=True)
        got = {r.recipients[0]: titles_in(r) for r in sink.received[before:]}
        expected = {email: per_day[day] for email, per_day in EXPECTED.items() if per_day[day]}
        assert got == expected, f"day {day + 1}"
        # Running the cycle again the same day sends nothing.
        assert cycle(factory, settings, now + timedelta(hours=1), all_due=True).sent == 0
    assert "linus@xn--bcher-kva.example" not in {r.recipients[0] for r in sink.received}  # paused
    for received in sink.received:
        msg = parsed(received)
        for header in HEADERS:
            assert msg[header], header
        assert msg.get_content_type() == "multipart/alternative"
        assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]


# A reader's own export, written by hand: the paper of dump 000 by its title alone, as a
# preprint imported from a reference manager before the bot has seen it.
MINIMAX_BIBTEX = b"@article{lai2026msa,\n  title = {{MiniMax} Sparse Attention},\n  author = {Lai, Xunhao},\n}\n"
MINIMAX_CODE = "https://github.com/MiniMax-AI/MSA"


def test_seed_replay_tells_the_readers_who_keep_a_paper_when_its_code_appears(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    subscribe_examples(factory, settings)
    # A reader of two interests, of which neither is MiniMax's.
    two = clean_fields("two@example.org", filter='Spiking: snn or fpga; Caches: "kv cache" or coherence')
    save(factory, settings, [two], DAY1 - timedelta(days=1))
    sections: dict[int, list[str]] = {}
    for email in ("carver@example.org", "edsger@example.org", "two@example.org"):  # never sent it; sent it
        with factory() as session:
            keeper = get_subscriber(session, email)
        assert keeper is not None
        import_library(factory, keeper.id, MINIMAX_BIBTEX, DAY1 - timedelta(days=1))
    told: dict[str, list[int]] = {}
    for day, path in enumerate(seed_files):
        now = DAY1 + timedelta(days=day)
        before = len(sink.received)
        ingest_file(factory, path, now=now, rules=RULES)
        cycle(factory, settings, now, all_due=True)
        for received in sink.received[before:]:
            text = parsed(received).get_body(("plain",)).get_content()
            if received.recipients[0] == "two@example.org":
                sections[day + 1] = re.findall(r"^(\w+)$", text.replace("\r\n", "\n").split("\n\n")[1], re.M)
            else:
                assert titles_in(received) == EXPECTED[received.recipients[0]][day]  # the entries are as ever
            if "Your library" in text:
                told.setdefault(received.recipients[0], []).append(day + 1)
                news = " ".join(text.split("Your library", 1)[1].split())
                assert news.startswith(f"------------ * {MINIMAX} (code and model released) {MINIMAX_CODE} ")
    # Dump 002 gives its code and model links; dump 003 lists it again: no news twice.
    assert told == {"carver@example.org": [3], "edsger@example.org": [3], "two@example.org": [3]}
    assert sections[3] == ["Spiking", "Caches"]  # LMCache and Partitioned Tags under the second


def test_message_headers_and_rendering_of_the_seeds(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    save(
        factory,
        settings,
        [clean_fields("ada@example.org", name='Ada "Countess" Lovelace, née Byron')],
        DAY1 - timedelta(days=1),
    )
    for path in seed_files[:3]:
        ingest_file(factory, path, now=DAY1, rules=RULES)
    # Whole summaries: the LaTeX checked below sits deep in some abstracts.
    whole = settings.model_copy(update={"digest": settings.digest.model_copy(update={"summary_chars": 0})})
    cycle(factory, whole, DAY1, all_due=True)
    (received,) = sink.received
    msg = parsed(received)
    assert msg["To"].addresses[0].display_name == 'Ada "Countess" Lovelace, née Byron'
    assert msg["From"].addresses[0].addr_spec == "digest@bot.example"
    assert msg["Subject"].startswith("16 new entries: gpu, llm, ")
    assert re.fullmatch(r"<digest\.\d+\.[0-9a-f]{12}@bot\.example>", msg["Message-ID"])
    assert msg["List-Id"] == "Research Digest <digest.digestbot.localhost>"
    assert msg["List-Unsubscribe"].startswith("<mailto:digest@bot.example?subject=unsubscribe%20")
    assert msg["List-Unsubscribe-Post"] is None  # no https URL configured
    assert msg["Auto-Submitted"] == "auto-generated"
    text = msg.get_body(("plain",)).get_content()
    html = msg.get_body(("html",)).get_content()
    flat_text, flat_html = " ".join(text.split()), " ".join(html.split())
    for shown in ("1.45×", "149 μs", "2.5×", "92.80%", "0.05 mJ", "67.2% and"):
        assert shown in flat_text, shown
        assert shown in flat_html, shown
    assert "\\times" not in text and "$" not in text
    assert all(
        len(line) <= 78 or re.fullmatch(r"\s*(\[\d+\] )?(https?|mailto):\S+", line) for line in text.splitlines()
    )
    # Styles are inlined; only the @media rules (dark mode) stay in a <style>.
    assert re.fullmatch(r"\s*@media[^{]*\{.*\}\s*", re.search(r"<style>(.*?)</style>", html, re.S).group(1), re.S)
    assert html.count("<style") == 1 and 'style="' in html
    assert 'href="https://github.com/LMCache/LMCache"' in html
    assert "https://arxiv.org/search/?query=Eidola" in html  # no link known: a title search
    assert html.count("you asked for every paper") == 1 and "matches everything" not in html  # said once, in the header


def test_public_url_adds_one_click_unsubscribe(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    settings = settings.model_copy(
        update={"web": settings.web.model_copy(update={"public_url": "https://digest.example.org"})}
    )
    save(factory, settings, [clean_fields("ada@example.org")], DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    cycle(factory, settings, DAY1, all_due=True)
    msg = parsed(sink.received[0])
    # Only the https URI: nothing reads the unsubscribe mailbox, so no mailto is offered.
    (https,) = [u.strip(" <>") for u in msg["List-Unsubscribe"].split(",")]
    assert re.fullmatch(r"https://digest\.example\.org/u/\d+\.[A-Za-z0-9_-]{24}", https)
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert "mailto:" not in msg.as_string()


def test_hostile_title_and_display_name_are_escaped(
    factory: sessionmaker[Session], settings: Settings, sink: Sink
) -> None:
    save(factory, settings, [clean_fields("eve@example.org", name="Eve <script>")], DAY1 - timedelta(days=1))
    dump = render_dump([("<script>alert(1)</script> & Friends", ["A & B"], date(2026, 6, 14), "x < y & <b>z</b>")])
    assert ingest_bytes(factory, dump.encode(), name="evil", now=DAY1, rules=RULES).new == 1
    report = cycle(factory, settings, DAY1, all_due=True)
    assert report.sent == 1, (report, list_digests(factory()))
    msg = parsed(sink.received[0])
    html = msg.get_body(("html",)).get_content()
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; Friends" in html
    assert "x &lt; y &amp; &lt;b&gt;z&lt;/b&gt;" in html
    assert "<script>alert(1)</script> & Friends" in msg.get_body(("plain",)).get_content()
    assert msg["To"].addresses[0].display_name == "Eve <script>"


def _subscriber(factory: sessionmaker[Session], settings: Settings, email: str, zone: str, hour: int) -> None:
    save(
        factory,
        settings,
        [clean_fields(email, timezone=zone, send_hour=hour, backfill="all")],
        DAY1 - timedelta(days=30),
    )


def test_send_times_follow_each_zone_including_dst(
    factory: sessionmaker[Session], settings: Settings, sink: Sink
) -> None:
    _subscriber(factory, settings, "tokyo@example.org", "Asia/Tokyo", 8)
    _subscriber(factory, settings, "la@example.org", "America/Los_Angeles", 8)

    def due_at(now: datetime) -> set[str]:
        ingest_bytes(
            factory,
            render_dump([(f"Paper at {now.isoformat()}", ["A"], date(2026, 3, 1), "x")]).encode(),
            name=f"d{now.isoformat()}",
            now=now - timedelta(minutes=1),
            rules=RULES,
        )
        before = len(sink.received)
        cycle(factory, settings, now)
        return {r.recipients[0].split("@")[0] for r in sink.received[before:]}

    # Tokyo (UTC+9, no DST): local day D is due from D-1 23:00 UTC.
    # Los Angeles: 08:00 PST = 16:00 UTC until DST starts on 2026-03-08, then 08:00 PDT = 15:00 UTC.
    timeline = [
        (datetime(2026, 3, 6, 15, 59, tzinfo=UTC), set()),
        (datetime(2026, 3, 6, 16, 0, tzinfo=UTC), {"la"}),
        (datetime(2026, 3, 6, 22, 59, tzinfo=UTC), set()),
        (datetime(2026, 3, 6, 23, 0, tzinfo=UTC), {"tokyo"}),
        (datetime(2026, 3, 7, 15, 59, tzinfo=UTC), set()),
        (datetime(2026, 3, 7, 16, 0, tzinfo=UTC), {"la"}),
        (datetime(2026, 3, 7, 23, 0, tzinfo=UTC), {"tokyo"}),
        (datetime(2026, 3, 8, 14, 59, tzinfo=UTC), set()),
        (datetime(2026, 3, 8, 15, 0, tzinfo=UTC), {"la"}),  # one hour earlier in UTC: DST
        (datetime(2026, 3, 8, 23, 0, tzinfo=UTC), {"tokyo"}),
    ]
    assert [due_at(moment) for moment, _ in timeline] == [expected for _, expected in timeline]


def test_three_days_down_make_one_digest_with_everything(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    subscribe_examples(factory, settings)
    for day, path in enumerate(seed_files[:3]):  # the bot is down: dumps arrive, nobody plans
        ingest_file(factory, path, now=DAY1 + timedelta(days=day), rules=RULES)
    cycle(factory, settings, DAY1 + timedelta(days=3), all_due=True)
    got = {r.recipients[0]: titles_in(r) for r in sink.received}
    assert got == {email: set().union(*per_day[:3]) for email, per_day in EXPECTED.items()}
    assert len(got["ada@example.org"]) == 16


def test_too_many_entries_roll_over_best_first(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    settings = settings.model_copy(update={"digest": settings.digest.model_copy(update={"max_entries": 3})})
    save(factory, settings, [clean_fields("grace@example.org", filter="gpu and llm")], DAY1 - timedelta(days=1))
    for path in seed_files[:3]:
        ingest_file(factory, path, now=DAY1, rules=RULES)
    cycle(factory, settings, DAY1, all_due=True)
    cycle(factory, settings, DAY1 + timedelta(days=1), all_due=True)
    first, second = (titles_in(r) for r in sink.received)
    assert len(first) == 3 and len(second) == 3 and not first & second
    assert "3 more matching entries will follow" in parsed(sink.received[0]).get_body(("plain",)).get_content()


def _one(factory: sessionmaker[Session]) -> tuple[int, int, str]:
    with factory() as s:
        (d,) = [d for d in list_digests(s) if d.kind is DigestKind.SCHEDULED]
    return d.id, d.attempts, d.state.value


def test_451_twice_then_250_is_one_delivery_after_three_attempts(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, handler: SinkHandler, seed_files: list[Path]
) -> None:
    handler.faults = lambda rcpt, attempt: Fault("data", "451 4.3.0 try later") if attempt < 2 else None
    save(factory, settings, [clean_fields("ada@example.org")], DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    cycle(factory, settings, DAY1, all_due=True)
    for hours in (3, 6, 9):  # past any backoff
        asyncio.run(deliver_now(factory, Parts(settings), clock=lambda hours=hours: DAY1 + timedelta(hours=hours)))
    assert len(sink.received) == 1
    assert _one(factory)[1:] == (3, "sent")


def test_550_is_permanent_and_bounces_the_subscriber(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, handler: SinkHandler, seed_files: list[Path]
) -> None:
    handler.faults = lambda rcpt, attempt: Fault("rcpt", "550 5.1.1 no such user") if rcpt.startswith("gone") else None
    save(
        factory, settings, [clean_fields("gone@example.org"), clean_fields("ada@example.org")], DAY1 - timedelta(days=1)
    )
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    report = cycle(factory, settings, DAY1, all_due=True)
    assert (report.sent, report.failed, report.bounced) == (1, 1, 1)
    with factory() as s:
        gone = get_subscriber(s, "gone@example.org")
        assert gone is not None and gone.status is SubscriberStatus.BOUNCED
        (failed,) = list_digests(s, state=DigestState.FAILED)
        assert failed.smtp_code == 550 and "550" in (failed.last_error or "")
    ingest_file(factory, seed_files[1], now=DAY1 + timedelta(days=1), rules=RULES)
    cycle(factory, settings, DAY1 + timedelta(days=1), all_due=True)
    with factory() as s:
        assert [d.subscriber_email for d in list_digests(s, local_date=date(2026, 6, 15))] == ["ada@example.org"]


def test_a_reader_who_pauses_while_their_digest_is_refused_is_bounced_all_the_same(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, handler: SinkHandler, seed_files: list[Path]
) -> None:
    """One bounce rule (``bot.domain.statuses``) for the relay's refusals and the inbox's
    bounces: a pause does not shield a dead address, which would bounce again on resume.
    The reader pauses after their digest was claimed and before the relay refuses it."""

    def pause_then_refuse(rcpt: str, attempt: int) -> Fault:
        change_status(factory, "gone@example.org", SubscriberStatus.PAUSED, DAY1)
        return Fault("rcpt", "550 5.1.1 no such user")

    handler.faults = pause_then_refuse
    save(factory, settings, [clean_fields("gone@example.org")], DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    report = cycle(factory, settings, DAY1, all_due=True)
    assert (report.failed, report.bounced) == (1, 1)
    with factory() as s:
        gone = get_subscriber(s, "gone@example.org")
        assert gone is not None and gone.status is SubscriberStatus.BOUNCED


def test_a_connection_dropped_before_the_final_dot_is_retried_and_delivered_once(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, handler: SinkHandler, seed_files: list[Path]
) -> None:
    handler.faults = lambda rcpt, attempt: Fault("rcpt", drop=True) if attempt == 0 else None
    save(factory, settings, [clean_fields("ada@example.org")], DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    first = cycle(factory, settings, DAY1, all_due=True)
    assert (first.sent, first.retrying) == (0, 1)
    cycle(factory, settings, DAY1 + timedelta(hours=3))
    assert len(sink.received) == 1
    assert _one(factory)[1:] == (2, "sent")


def test_a_connection_dropped_after_the_body_is_unknown_and_never_sent_again(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, handler: SinkHandler, seed_files: list[Path]
) -> None:
    """RFC 1047: a server may have queued a message whose reply never came.  Sent again,
    the reader gets it twice; so it is unknown, and nothing sends it again by itself."""
    handler.faults = lambda rcpt, attempt: Fault("data", drop=True) if attempt == 0 else None
    save(factory, settings, [clean_fields("ada@example.org")], DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    first = cycle(factory, settings, DAY1, all_due=True)
    assert (first.sent, first.retrying, first.unknown) == (0, 0, 1)
    cycle(factory, settings, DAY1 + timedelta(hours=3))
    assert [body.fate for body in handler.bodies] == ["dropped"]
    assert _one(factory)[1:] == (1, "unknown")
    with factory() as s:
        assert "no reply to the final dot" in (list_digests(s)[0].last_error or "")


def test_a_late_reply_is_waited_for_and_one_past_the_wait_is_unknown(
    factory: sessionmaker[Session], tmp_path: Path, sink: Sink, handler: SinkHandler, seed_files: list[Path]
) -> None:
    """The reply to the final dot gets ``smtp.final_reply_seconds`` (RFC 5321: ten
    minutes), not the steps' ``timeout_seconds``: a relay that answers 250 after 3 s when
    the steps have 1 s is one delivery, not a timeout and a second copy; one that answers
    after the wait is unknown, and what the relay queued is the only copy."""
    settings = settings_for(
        tmp_path,
        smtp={"port": sink.port, "timeout_seconds": 1, "final_reply_seconds": 6, "retry_base_seconds": 60},
    )
    slow = {"ada@example.org": 3.0, "bob@example.org": 9.0}
    handler.faults = lambda rcpt, attempt: Fault("data", "250 OK", stall=slow[rcpt]) if attempt == 0 else None
    save(factory, settings, [clean_fields(email) for email in slow], DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    first = cycle(factory, settings, DAY1, all_due=True)
    assert (first.sent, first.unknown, first.retrying) == (1, 1, 0)
    cycle(factory, settings, DAY1 + timedelta(hours=3))
    deadline = time.monotonic() + 30
    while len(handler.bodies) < 2 and time.monotonic() < deadline:  # the relay sees the hang-up
        time.sleep(0.05)
    assert sorted((body.recipient, body.fate) for body in handler.bodies) == [
        ("ada@example.org", "accepted"),
        ("bob@example.org", "late"),
    ]
    with factory() as s:
        states = {d.subscriber_email: (d.state.value, d.last_error or "") for d in list_digests(s)}
    assert states["ada@example.org"] == ("sent", "")
    assert states["bob@example.org"][0] == "unknown" and "the wait ran out" in states["bob@example.org"][1]


def test_retries_give_up_after_max_attempts(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, handler: SinkHandler, seed_files: list[Path]
) -> None:
    handler.faults = lambda rcpt, attempt: Fault("rcpt", "452 4.2.2 mailbox full")
    save(factory, settings, [clean_fields("ada@example.org")], DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    cycle(factory, settings, DAY1, all_due=True)
    for hours in range(3, 18, 3):  # past any backoff (base 60 s, so at most 8 min by attempt 4)
        asyncio.run(deliver_now(factory, Parts(settings), clock=lambda hours=hours: DAY1 + timedelta(hours=hours)))
    assert _one(factory)[1:] == (4, "failed")
    with factory() as s:
        ada = get_subscriber(s, "ada@example.org")
        assert ada is not None and ada.status is SubscriberStatus.ACTIVE  # 4xx never bounces


def test_resend_carries_the_same_entries_and_leaves_the_ledger(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    save(factory, settings, [clean_fields("ada@example.org")], DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    cycle(factory, settings, DAY1, all_due=True)
    ingest_file(factory, seed_files[2], now=DAY1 + timedelta(hours=1), rules=RULES)  # summaries change meanwhile

    def ledger() -> list[tuple[int, int, int]]:
        claimed = claims()
        with factory() as s:
            return sorted(s.execute(select(claimed.c.subscriber_id, claimed.c.entry_id, claimed.c.digest_id)).all())

    before = ledger()
    original_id = _one(factory)[0]
    resend(factory, settings, original_id, now=DAY1 + timedelta(hours=2))
    asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY1 + timedelta(hours=2)))
    assert ledger() == before
    original, copy = (parsed(r) for r in sink.received)
    assert copy["Subject"] == "[resent] " + original["Subject"]
    assert copy["X-Digestbot-Resend-Of"] == original["Message-ID"]
    assert copy["Message-ID"] != original["Message-ID"]

    def body(m: EmailMessage) -> str:
        return str(m.get_body(("plain",)).get_content().split("\n", 3)[3])

    assert body(copy).replace(" - resent copy of an earlier digest", "") == body(original)
    assert "The problem is that quadratic-cost softmax attention" in body(copy)  # the pinned (day 1) summary


def test_a_sending_row_whose_lease_expired_is_sent_again_with_the_same_message_id(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    """A worker that died after its claim and before the wire: its digest is due again once
    the lease runs out (by the store's clock), and goes out as planned."""
    from bot.store.engine import transaction
    from bot.store.queue import claim_due
    from bot.store.schema import Digest

    save(factory, settings, [clean_fields("ada@example.org")], DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    plan(factory, settings, RULES, now=DAY1, all_due=True)
    with transaction(factory) as s:  # a worker claims it and dies
        assert len(claim_due(s, now=DAY1, worker="dead", lease_seconds=300, limit=10)) == 1
        lease = DAY1 if factory.kw["bind"].dialect.name == "sqlite" else datetime.now(UTC)
    assert asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY1 + timedelta(seconds=1))).sent == 0
    with transaction(factory) as s:  # the lease runs out
        s.execute(update(Digest).values(lease_expires_at=lease - timedelta(seconds=1)))
    assert asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY1 + timedelta(seconds=1))).sent == 1
    with factory() as s:
        (digest,) = list_digests(s)
    assert parsed(sink.received[0])["Message-ID"] == digest.message_id


def test_an_empty_day_sends_nothing_unless_configured(
    factory: sessionmaker[Session], settings: Settings, sink: Sink
) -> None:
    save(factory, settings, [clean_fields("ada@example.org", filter="nothing-matches-this")], DAY1 - timedelta(days=1))
    cycle(factory, settings, DAY1, all_due=True)
    assert sink.received == []
    with factory() as s:
        assert [d.state for d in list_digests(s)] == [DigestState.EMPTY]
    with factory() as s:
        assert s.scalar(select(func.count()).select_from(claims())) == 0


def test_a_message_that_cannot_be_built_fails_alone(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path], tmp_path: Path
) -> None:
    import shutil

    templates = tmp_path / "templates"
    shutil.copytree(ROOT / "templates", templates)
    # An operator's typo that only some subscribers' messages reach.
    entry = templates / "_header.html.j2"
    entry.write_text(
        entry.read_text().replace(
            "<h1>{{ heading }}</h1>",
            "<h1>{% if subscriber_email.startswith('bad') %}{{ no_such_variable }}{% endif %}{{ heading }}</h1>",
        )
    )
    settings = settings.model_copy(update={"paths": settings.paths.model_copy(update={"templates_dir": templates})})
    save(
        factory, settings, [clean_fields("bad@example.org"), clean_fields("ada@example.org")], DAY1 - timedelta(days=1)
    )
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    report = cycle(factory, settings, DAY1, all_due=True)
    assert (report.sent, report.failed) == (1, 1)
    with factory() as s:
        (failed,) = list_digests(s, state=DigestState.FAILED)
    assert failed.subscriber_email == "bad@example.org"
    assert "cannot build the message: UndefinedError" in (failed.last_error or "")
    assert [r.recipients[0] for r in sink.received] == ["ada@example.org"]


def test_messages_built_in_a_separate_process_are_the_same(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    """digest.build_processes: batches built in a worker process while this one
    sends give the same messages as building them here."""
    subscribe_examples(factory, settings)
    for path in seed_files[:3]:
        ingest_file(factory, path, now=DAY1 - timedelta(hours=1), rules=RULES)
    plan(factory, settings, RULES, now=DAY1, all_due=True)
    remote = settings.model_copy(update={"digest": settings.digest.model_copy(update={"build_processes": 1})})
    report = asyncio.run(deliver_now(factory, Parts(remote), clock=lambda: DAY1))
    assert report.sent == len(sink.received) > 3
    # The same digests again, built here, are the same bytes.
    from bot.mail.mailer import Mailer
    from bot.store.digests import get_digests

    with factory() as session:
        rows = get_digests(session, [d.id for d in list_digests(session)][::-1])
        local = {b.row.id: b.data for b in Mailer(Parts(settings)).build(session, rows, DAY1)}
    by_id = {parsed(r)["Message-ID"]: r.data for r in sink.received}
    assert sorted(by_id.values()) == sorted(local[row.id] for row in rows if row.message_id in by_id)


def test_stopping_the_daemon_mid_delivery_is_clean_and_loses_nothing(
    engine,
    factory: sessionmaker[Session],
    settings: Settings,
    handler: SinkHandler,
    sink: Sink,
    seed_files: list[Path],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delivery longer than the deliver job's interval, then SIGTERM while a batch
    is on the wire: no tick is reported as skipped or failed, the sends in flight
    finish and are recorded, and nothing is left 'sending'."""
    import logging

    import bot.run.scheduler
    from bot.run.scheduler import Daemon

    subscribe_examples(factory, settings)
    for path in seed_files[:3]:
        ingest_file(factory, path, now=DAY1 - timedelta(hours=1), rules=RULES)
    queued = len(plan(factory, settings, RULES, now=DAY1, all_due=True).planned)
    assert queued >= 4
    monkeypatch.setattr(bot.run.scheduler, "DELIVER_EVERY", timedelta(seconds=0.3))
    handler.faults = lambda recipient, attempt: Fault("data", stall=1.2)  # a slow server, then 250

    async def run() -> None:
        daemon = Daemon(factory, Parts(settings, rules=RULES), engine=engine, clock=lambda: DAY1, plan_jobs=False)
        running = asyncio.ensure_future(daemon.run())
        for _ in range(1500):
            if handler.received:
                break
            await asyncio.sleep(0.02)
        daemon.stop.set()
        await asyncio.wait_for(running, 30)

    with caplog.at_level(logging.INFO):
        asyncio.run(run())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]
    with factory() as session:
        states = [d.state for d in list_digests(session)]
    assert DigestState.SENDING not in states
    assert states.count(DigestState.SENT) == len(sink.received) >= 1
    assert states.count(DigestState.SENT) + states.count(DigestState.QUEUED) == queued


def test_claims_hand_out_the_oldest_due_digests_of_every_state_in_order(engine, factory: sessionmaker[Session]) -> None:
    """claim_due reads each state's due digests off the index and merges them; batch
    after batch it must hand out what one query over every due digest, sorted by
    (next_attempt_at, id), gives: queued and retry_wait rows whose time has come
    and sending rows whose lease ran out, ties broken by id, nothing else."""
    import random

    from bot.store.engine import transaction
    from bot.store.queue import _due_queries, claim_due, count_due
    from bot.store.schema import Digest

    def claim() -> list[int]:
        with transaction(factory) as s:
            return [c.digest_id for c in claim_due(s, now=now, worker="w", lease_seconds=300, limit=7)]

    queue_digests(factory, 80)
    now = datetime(2026, 6, 14, 12, tzinfo=UTC)
    # Leases are judged by the store's clock: PostgreSQL's own, the one worker's on SQLite.
    leases_now = now if engine.dialect.name == "sqlite" else datetime.now(UTC)
    rng = random.Random(5)
    with transaction(factory) as s:
        for d in s.scalars(select(Digest)):
            d.state = rng.choice(["queued", "retry_wait", "sending", "sent", "failed"])
            d.next_attempt_at = now + timedelta(minutes=rng.randint(-20, 20))  # 41 values for 80 rows: ties
            # Never "now" itself: PostgreSQL's clock moves on while the test runs.
            lease = timedelta(minutes=rng.choice([-5, -4, -3, -2, -1, 1, 2, 3, 4, 5]))
            d.lease_expires_at = leases_now + lease if d.state == "sending" else None
            # A message on the wire is never claimed again, whatever its lease says.
            d.wire_at = leases_now if d.state == "sending" and rng.random() < 0.3 else None
    with factory() as s:
        rows = sorted(s.scalars(select(Digest)), key=lambda d: (d.next_attempt_at, d.id))
        expected = [
            d.id
            for d in rows
            if (d.state in ("queued", "retry_wait") and d.next_attempt_at <= now)
            or (d.state == "sending" and d.lease_expires_at < leases_now and d.wire_at is None)
        ]
    assert len(expected) >= 25 and {"queued", "retry_wait", "sending"} <= {d.state for d in rows if d.id in expected}
    with factory() as s:
        assert count_due(s, now) == len(expected)
    claimed: list[int] = []
    while batch := claim():
        assert len(batch) <= 7
        claimed += batch
    assert claimed == expected
    if engine.dialect.name == "sqlite":
        # Each state's rows come off the index in order: no sort of every due digest per claim.
        with engine.connect() as connection:
            for query in _due_queries(now):
                sql = (
                    query.order_by(Digest.next_attempt_at, Digest.id)
                    .limit(7)
                    .compile(engine, compile_kwargs={"literal_binds": True})
                )
                plan_rows = [r[-1] for r in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
                if "state = 'sending'" not in str(sql):  # in-flight rows are few: those may be sorted
                    assert not any("TEMP B-TREE" in r for r in plan_rows), plan_rows


def test_a_weekly_digest_says_this_week_and_a_daily_one_does_not(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path]
) -> None:
    """Same entries, one message template each: the weekly reader's subject and header say
    "this week" (the template cache must not hand one's body to the other)."""
    people = [clean_fields(f"{c}@example.org", cadence=c.replace("-", ":")) for c in ("daily", "weekly-sun")]
    save(factory, settings, people, DAY1 - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=DAY1, rules=RULES)
    assert DAY1.strftime("%a") == "Sun"
    assert cycle(factory, settings, DAY1).sent == 2
    by_reader = {r.recipients[0]: parsed(r) for r in sink.received}
    weekly, daily = by_reader["weekly-sun@example.org"], by_reader["daily@example.org"]
    assert re.match(r"\d+ new entries this week: ", weekly["Subject"]) and "this week" not in daily["Subject"]
    assert "Your weekly research digest" in weekly.get_body(("plain",)).get_content()
    assert "new entries this week" in weekly.get_body(("html",)).get_content()
    assert "weekly" not in daily.get_body(("html",)).get_content().casefold()
    assert cycle(factory, settings, DAY1 + timedelta(days=1)).sent == 0  # Monday: neither is due again
