"""The deliver stage's own send (MAIL, RCPT, DATA without aiosmtplib's regex passes)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import aiosmtplib
import pytest
from aiosmtplib.protocol import PERIOD_REGEX, normalize_message_line_endings
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr
from sqlalchemy import event, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from bot.config import SmtpConfig
from bot.delivery import outcomes
from bot.delivery.leases import Leases
from bot.delivery.outcomes import RECORD_EVERY, Leftovers, Recorder, write_leftovers
from bot.delivery.smtp import Outcome, SendResult, SmtpPool
from bot.delivery.transmit import _can_send_prepared, _unstuffed, transmit
from bot.delivery.wire_marks import StoreUnwritable
from bot.domain import DeliverReport
from bot.mail.message import SmtpData, prepared
from bot.store.digests import DigestRow, get_digests
from bot.store.engine import transaction
from bot.store.queue import claim_due
from bot.store.schema import Digest
from bot.tools.sink import Fault, Sink, SinkHandler
from tests.helpers import queue_digests, settings_for

_lines = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")), max_size=30)


@given(_lines, st.booleans())
def test_prepared_is_what_aiosmtplib_would_send(lines: list[bytes], final_newline: bool) -> None:
    message = b"\r\n".join(lines) + (b"\r\n" if final_newline else b"")
    normalized = normalize_message_line_endings(message)
    ready = prepared(message)
    assert ready == SmtpData((PERIOD_REGEX.sub(b"..", normalized) + b".\r\n",), len(normalized))
    assert _unstuffed(ready) == normalized


def test_prepared_refuses_bare_line_ends() -> None:
    assert prepared(b"a\nb\r\n") is None
    assert prepared(b"a\rb\r\n") is None


def test_messages_arrive_unchanged_by_the_prepared_send() -> None:
    message = b"Subject: dots\r\n\r\n.starts with a dot\r\n..two\r\nmiddle . dot\r\n.\r\nlast"
    with Sink(SinkHandler()) as sink:

        async def run() -> bool:
            client = aiosmtplib.SMTP(hostname="127.0.0.1", port=sink.port, timeout=5)
            await client.connect()
            prepared = _can_send_prepared(client.protocol)
            response = await transmit(client, "bot@example.org", "reader@example.org", message)
            assert response.code == 250
            await transmit(client, "bot@example.org", "reader@example.org", b"Subject: bare\n\nline ends\n")
            await client.quit()
            return prepared

        # The installed aiosmtplib is one the fast way knows (else every send takes sendmail's).
        assert asyncio.run(run()) is True
    first, second = sink.received
    assert first.data == message + b"\r\n"
    assert (first.sender, first.recipients) == ("bot@example.org", ["reader@example.org"])
    assert second.message["Subject"] == "bare"


@pytest.mark.parametrize(
    ("fault", "outcome", "detail"),
    [
        (Fault("rcpt", "550 5.1.1 no such user"), Outcome.PERMANENT, "recipient refused: 550"),
        (Fault("rcpt", "451 4.3.0 try later"), Outcome.TEMPORARY, "recipient refused: 451"),
        (Fault("data", "452 4.3.1 full"), Outcome.TEMPORARY, "452"),
        (Fault("data", "554 5.6.0 rejected"), Outcome.PERMANENT, "554"),
    ],
)
def test_refusals_are_classified_as_sendmail_reported_them(fault: Fault, outcome: Outcome, detail: str) -> None:
    handler = SinkHandler(faults=lambda recipient, attempt: fault)
    with Sink(handler) as sink:

        async def run():
            async with SmtpPool(
                SmtpConfig(port=sink.port, timeout_seconds=5), SmtpConfig().resolved_password()
            ) as pool:
                return await pool.send("bot@example.org", "reader@example.org", b"Subject: x\r\n\r\nbody\r\n")

        result = asyncio.run(run())
    assert result.outcome is outcome
    assert result.detail.startswith(detail)


def _envelope_by_validation(address: str) -> str:
    from email_validator import EmailNotValidError, validate_email

    try:
        checked = validate_email(address, check_deliverability=False)
    except EmailNotValidError:
        return address
    return checked.ascii_email or checked.normalized


_ASCII_ADDRESS = st.text(st.sampled_from("aZ09.-_+!#'@\"\\ []xn"), min_size=1, max_size=20).map(
    lambda s: s if "@" in s else s + "@example.org"
)


@given(st.one_of(st.emails(), _ASCII_ADDRESS, st.emails().map(str.upper), st.text(max_size=30)))
def test_envelope_address_fast_path_agrees_with_validation(address: str) -> None:
    """The envelope's recipient skips email_validator for plain ASCII addresses with a
    lower-case domain; for every address it must give what validation gives."""
    from bot.mail.message import envelope_address

    assert envelope_address(address) == _envelope_by_validation(address)


def test_envelope_address_keeps_idn_handling() -> None:
    from bot.mail.message import envelope_address

    assert envelope_address("linus@bücher.example") == "linus@xn--bcher-kva.example"
    assert envelope_address("Ada@Example.ORG") == "Ada@example.org"
    assert envelope_address("ada@xn--bcher-kva.example") == "ada@xn--bcher-kva.example"


def test_plain_addresses_are_quoted_as_aiosmtplib_quotes_them() -> None:
    """transmit writes MAIL FROM:<a> and RCPT TO:<b> itself for plain addresses;
    aiosmtplib's own quoting must give the same bytes for every one of them."""
    from aiosmtplib.email import quote_address

    from bot.delivery.transmit import _PLAIN_ADDRESS

    @given(st.from_regex(_PLAIN_ADDRESS, fullmatch=True))
    def check(address: str) -> None:
        assert quote_address(address) == f"<{address}>"

    check()
    for odd in (
        '"quoted local"@example.org',
        "a b@example.org",
        "a<b@example.org",
        "a@b@example.org",
        "linus@bücher.example",
        "a@[127.0.0.1]",
        "a..b@example.org",
        ".a@example.org",
    ):
        assert not _PLAIN_ADDRESS.fullmatch(odd), odd


def _claimed_rows(factory: sessionmaker[Session], count: int) -> tuple[Leases, list[DigestRow]]:
    queue_digests(factory, count)
    now = datetime.now(UTC)
    with transaction(factory) as session:
        claims = claim_due(session, now=now, worker="w", lease_seconds=60, limit=count)
    leases = Leases(factory, worker="w", lease_seconds=60, clock=lambda: datetime.now(UTC))
    leases.hold(claims)
    with factory() as session:
        return leases, get_digests(session, [c.digest_id for c in claims])


def _states(factory: sessionmaker[Session]) -> Counter[str]:
    with factory() as session:
        return Counter(session.scalars(select(Digest.state)))


def test_answers_are_written_in_groups_on_time_and_marks_at_once(
    factory: sessionmaker[Session], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delivery's one writer: a mark is written at once (a message waits for its own),
    answers in groups of RECORD_EVERY or RECORD_SECONDS after the first, whichever first."""
    leases, rows = _claimed_rows(factory, RECORD_EVERY + 2)
    settings = settings_for(tmp_path)
    sent = SendResult(Outcome.SENT, 250, "ok")
    monkeypatch.setattr(outcomes, "RECORD_SECONDS", 3600.0)  # a group waits to be full ...

    async def until(states: dict[str, int]) -> None:
        async with asyncio.timeout(60):
            while _states(factory) != states:
                await asyncio.sleep(0.01)

    async def scenario() -> DeliverReport:
        report = DeliverReport()
        recorder = Recorder(
            factory, settings, leases, clock=lambda: datetime.now(UTC), report=report, leftovers=Leftovers()
        )
        for row in rows:
            assert await recorder.marks.on_wire_now(row)
        for row in rows[: RECORD_EVERY - 1]:
            recorder.answer(row, sent)
        await asyncio.sleep(0.2)
        assert _states(factory) == {"sending": len(rows)}
        recorder.answer(rows[RECORD_EVERY - 1], sent)
        await until({"sent": RECORD_EVERY, "sending": 2})
        monkeypatch.setattr(outcomes, "RECORD_SECONDS", 0.05)  # ... or its time to come
        recorder.answer(rows[RECORD_EVERY], sent)
        await until({"sent": RECORD_EVERY + 1, "sending": 1})
        monkeypatch.setattr(outcomes, "RECORD_SECONDS", 3600.0)
        recorder.answer(rows[-1], sent)
        await recorder.flush()  # a batch's end writes what waits
        assert _states(factory) == {"sent": len(rows)}
        return report

    assert asyncio.run(scenario()).sent == len(rows)
    with factory() as session:
        assert session.scalar(select(func.count()).where(Digest.wire_at.is_(None))) == 0


def test_a_refused_write_stops_the_wire_and_keeps_the_answers(factory: sessionmaker[Session], tmp_path: Path) -> None:
    """The first write the store refuses: nothing more is marked (so nothing more goes on
    the wire), and the answers still coming in are kept, to be written when it takes
    writes again, as the claims they answer."""
    leases, rows = _claimed_rows(factory, 4)
    settings = settings_for(tmp_path)
    sent = SendResult(Outcome.SENT, 250, "ok")
    leftovers = Leftovers()
    refusing = {"on": False}

    @event.listens_for(factory.kw["bind"], "before_cursor_execute")
    def full_disk(conn: object, cursor: object, statement: str, *args: object) -> None:
        if refusing["on"] and statement.lstrip().upper().startswith("UPDATE"):
            raise OperationalError(statement, (), Exception("database or disk is full"))

    async def scenario() -> None:
        recorder = Recorder(
            factory, settings, leases, clock=lambda: datetime.now(UTC), report=DeliverReport(), leftovers=leftovers
        )
        assert await recorder.marks.on_wire_now(rows[0]) and await recorder.marks.on_wire_now(rows[1])
        refusing["on"] = True
        recorder.answer(rows[0], sent)
        with pytest.raises(StoreUnwritable):
            await recorder.marks.on_wire_now(rows[2])
        with pytest.raises(StoreUnwritable):
            await recorder.marks.on_wire_now(rows[3])
        recorder.answer(rows[1], sent)  # on the wire before the refusal: its answer is kept
        await recorder.flush()

    try:
        asyncio.run(scenario())
    finally:
        event.remove(factory.kw["bind"], "before_cursor_execute", full_disk)
    assert [a.row.id for a in leftovers.answers] == [rows[0].id, rows[1].id]
    with factory() as session:
        on_wire = set(session.scalars(select(Digest.id).where(Digest.wire_at.is_not(None))))
    assert on_wire == {rows[0].id, rows[1].id}  # the other two never went: due again when their leases run out
    recorded, _ = write_leftovers(factory, settings, leftovers, worker="w")
    assert {done.row.id for done in recorded} == {rows[0].id, rows[1].id} and not leftovers
    assert _states(factory) == {"sent": 2, "sending": 2}


def test_a_stop_ends_the_sends_waiting_for_the_rate_limit_at_once() -> None:
    """Claims hold ten seconds of the relay: at smtp.rate_per_second = 1, ten sends wait
    their turn.  A stop puts none of them on the wire and ends their waits at once,
    instead of letting each take its turn to learn that it may not go."""
    with Sink(SinkHandler()) as sink:
        config = SmtpConfig(host="127.0.0.1", port=sink.port, rate_per_second=1.0, pool_size=1)

        async def scenario() -> list[object]:
            pool = SmtpPool(config, SecretStr(""))
            sends = [
                asyncio.ensure_future(pool.send("bot@example.org", f"r{n}@example.org", b"Subject: x\r\n\r\nx\r\n"))
                for n in range(10)
            ]
            await asyncio.sleep(1.5)  # one or two went, the rest wait for their turn
            pool.stop(5)
            # Their turns would take eight seconds more; a stop takes none of them.
            results = await asyncio.wait_for(asyncio.gather(*sends), 5)
            await pool.close()
            return results

        results = asyncio.run(scenario())
    sent = [r for r in results if r is not None]
    assert 1 <= len(sent) <= 3 and len(sink.received) == len(sent)
