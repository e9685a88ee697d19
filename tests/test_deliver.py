"""The deliver stage's own send (MAIL, RCPT, DATA without aiosmtplib's regex passes)."""

from __future__ import annotations

import asyncio
from typing import cast

import aiosmtplib
import pytest
from aiosmtplib.protocol import PERIOD_REGEX, normalize_message_line_endings
from hypothesis import given
from hypothesis import strategies as st

from bot.config import SmtpConfig
from bot.delivery.outcomes import RECORD_EVERY, RECORD_SECONDS, Outcomes
from bot.delivery.smtp import Outcome, SendResult, SmtpPool, _can_send_prepared, _unstuffed, transmit
from bot.mail.message import Prepared, prepared
from bot.store.digests import DigestRow
from bot.tools.sink import Fault, Sink, SinkHandler

_lines = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")), max_size=30)


@given(_lines, st.booleans())
def test_prepared_is_what_aiosmtplib_would_send(lines: list[bytes], final_newline: bool) -> None:
    message = b"\r\n".join(lines) + (b"\r\n" if final_newline else b"")
    normalized = normalize_message_line_endings(message)
    ready = prepared(message)
    assert ready == Prepared((PERIOD_REGEX.sub(b"..", normalized) + b".\r\n",), len(normalized))
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

    from bot.delivery.smtp import _PLAIN_ADDRESS

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


def test_outcomes_are_written_in_groups_on_time_and_a_failed_write_is_raised() -> None:
    sent = SendResult(Outcome.SENT, 250, "ok")
    row = cast(DigestRow, object())

    async def scenario() -> None:
        writes: list[int] = []
        outcomes = Outcomes(lambda done: writes.append(len(done)))
        for _ in range(RECORD_EVERY + 1):
            outcomes.add(row, sent)
        assert writes == [RECORD_EVERY]  # a full group at once, the next one waits ...
        await asyncio.sleep(RECORD_SECONDS * 2)
        assert writes == [RECORD_EVERY, 1]  # ... at most RECORD_SECONDS
        outcomes.write()
        assert writes == [RECORD_EVERY, 1]  # nothing left: no empty write

        def broken(done: object) -> None:
            raise OSError("disk full")

        failing = Outcomes(broken)
        failing.add(row, sent)
        await asyncio.sleep(RECORD_SECONDS * 2)  # fails on the timer, where nobody sees it ...
        with pytest.raises(OSError, match="disk full"):
            failing.write()  # ... so the batch's last write raises it

    asyncio.run(scenario())
