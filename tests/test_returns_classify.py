"""Classifying returned mail: real-world bounce formats, ARF, unsubscribe mails and
automatic replies, each with its expected outcome; and any bytes at all."""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.domain import ReturnKind
from bot.returns.classify import Addresses, classify
from tests.returned_mail import BOUNCES, KEY, RETURNS, UNSUBSCRIBE

KNOWN = Addresses(KEY, BOUNCES, UNSUBSCRIBE)
ADA_TOKEN = "7.eIestZEUXT7FklUCuvHwQx-x"

# fixture: (kind, VERP digest, first address, status, words the diagnostic holds)
EXPECTED = {
    "postfix_hard.eml": (ReturnKind.HARD, 42, "ada@example.com", "5.1.1", "User unknown in virtual mailbox table"),
    "exim_hard.eml": (ReturnKind.HARD, None, "bob@example.net", "5.1.1", "Recipient address rejected"),
    "sendmail_hard.eml": (ReturnKind.HARD, 43, "grace@example.edu", "5.1.1", "User unknown"),
    "gmail_hard.eml": (ReturnKind.HARD, 42, "ada@example.com", "5.1.1", "does not exist"),
    "outlook_hard.eml": (ReturnKind.HARD, 42, "ada@example.com", "5.1.10", "RecipientNotFound"),
    "ses_hard.eml": (ReturnKind.HARD, 43, "grace@example.edu", "5.1.1", "user unknown"),
    # VERP names the digest although the DSN names another (forwarded) address
    "verp_only.eml": (ReturnKind.HARD, 42, "ada.lovelace@forward-target.example", "5.1.1", "no such user"),
    # no VERP, no Status field, a Final-Recipient without its type: flufl.bounce finds the address
    "mangled_no_verp.eml": (ReturnKind.HARD, None, "carol@example.org", "5.1.1", "mailbox unavailable"),
    "soft_mailbox_full.eml": (ReturnKind.SOFT, 42, "ada@example.com", "5.2.2", "Mailbox full"),
    "delayed.eml": (ReturnKind.DELAYED, 42, "ada@example.com", "4.4.1", "Connection timed out"),
    "arf_abuse.eml": (ReturnKind.COMPLAINT, 42, "redacted@mail.example", "", "abuse report from SomeGenerator/1.0"),
    "unsubscribe_mail.eml": (ReturnKind.UNSUBSCRIBE, None, "ada@example.com", "", ""),
    "out_of_office.eml": (ReturnKind.OTHER, None, None, "", "automatic reply"),
    "vacation_quoting_footer.eml": (ReturnKind.OTHER, None, None, "", "automatic reply"),
    "person_question.eml": (ReturnKind.OTHER, None, None, "", ""),
}


def test_every_fixture_has_an_expected_outcome() -> None:
    assert sorted(p.name for p in RETURNS.glob("*.eml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_format_is_read_as_expected(name: str) -> None:
    kind, digest_id, address, status, words = EXPECTED[name]
    found = classify((RETURNS / name).read_bytes(), KNOWN)
    assert found.kind is kind
    assert found.digest_id == digest_id
    assert (found.addresses[0] if found.addresses else None) == address
    assert found.status == status
    assert words in found.diagnostic
    assert "\n" not in found.diagnostic and len(found.diagnostic) <= 300


def test_tokens_come_from_the_subject_or_the_quoted_original() -> None:
    assert classify((RETURNS / "unsubscribe_mail.eml").read_bytes(), KNOWN).token == ADA_TOKEN
    assert classify((RETURNS / "arf_abuse.eml").read_bytes(), KNOWN).token == ADA_TOKEN
    assert classify((RETURNS / "postfix_hard.eml").read_bytes(), KNOWN).token == ADA_TOKEN


def test_without_verp_nothing_is_read_from_return_paths() -> None:
    plain = Addresses(KEY, "", UNSUBSCRIBE)
    found = classify((RETURNS / "postfix_hard.eml").read_bytes(), plain)
    assert (found.kind, found.digest_id, found.addresses) == (ReturnKind.HARD, None, ("ada@example.com",))


def test_a_forged_verp_address_names_no_digest() -> None:
    data = (RETURNS / "verp_only.eml").read_bytes().replace(b"d42.artqb5lrcjmvzx4n", b"d41.artqb5lrcjmvzx4n")
    assert classify(data, KNOWN).digest_id is None
    other_key = Addresses(b"another-key-0123456789", BOUNCES, UNSUBSCRIBE)
    assert classify((RETURNS / "verp_only.eml").read_bytes(), other_key).digest_id is None


def _mail(subject: str, body: str, to: str = UNSUBSCRIBE, **headers: str) -> bytes:
    message = EmailMessage()
    message["From"] = "ada@example.com"
    message["To"] = to
    message["Subject"] = subject
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(body)
    return message.as_bytes()


def test_an_unsubscribe_mail_in_its_forms() -> None:
    forms = [
        _mail(f"unsubscribe {ADA_TOKEN}", ""),
        _mail(f"=?utf-8?q?unsubscribe_{ADA_TOKEN}?=", ""),  # an encoded subject
        _mail(f"Re: unsubscribe%20{ADA_TOKEN}", ""),
        _mail("please", f"unsubscribe {ADA_TOKEN}\n"),  # in the body, to the unsubscribe address
    ]
    for data in forms:
        found = classify(data, KNOWN)
        assert (found.kind, found.token) == (ReturnKind.UNSUBSCRIBE, ADA_TOKEN), data
    not_forms = [
        _mail("please", f"unsubscribe {ADA_TOKEN}\n", to="someone@lab.example.org"),  # body, elsewhere
        _mail("please", f"> unsubscribe {ADA_TOKEN}\n"),  # only quoted
        _mail(f"unsubscribe {ADA_TOKEN}", "", Auto_Submitted="auto-replied"),  # a machine's
        _mail(f"unsubscribe {ADA_TOKEN}x", ""),  # not a whole token
        _mail("unsubscribe me", ""),
    ]
    for data in not_forms:
        assert classify(data, KNOWN).kind is ReturnKind.OTHER, data


def test_an_arf_report_of_another_type_is_left_for_a_person() -> None:
    data = (RETURNS / "arf_abuse.eml").read_bytes().replace(b"Feedback-Type: abuse", b"Feedback-Type: not-spam")
    found = classify(data, KNOWN)
    assert found.kind is ReturnKind.OTHER and "not-spam" in found.diagnostic


def test_a_dsn_reporting_only_deliveries_is_no_bounce() -> None:
    data = (RETURNS / "postfix_hard.eml").read_bytes().replace(b"Action: failed", b"Action: relayed")
    assert classify(data, KNOWN).kind is ReturnKind.OTHER


@given(st.binary(max_size=3000))
def test_any_bytes_are_classified_without_error(data: bytes) -> None:
    assert classify(data, KNOWN).kind in set(ReturnKind)


@given(st.sampled_from(sorted(EXPECTED)), st.integers(0, 10_000), st.binary(min_size=1, max_size=40))
def test_a_fixture_with_bytes_changed_is_classified_without_error(name: str, at: int, junk: bytes) -> None:
    data = (RETURNS / name).read_bytes()
    at %= len(data)
    assert classify(data[:at] + junk + data[at + len(junk) :], KNOWN).kind in set(ReturnKind)


def test_hostile_structures_are_classified_without_error(tmp_path: Path) -> None:
    deep = (
        b"Content-Type: multipart/mixed; boundary=a\n\n" + b"--a\nContent-Type: multipart/mixed; boundary=a\n\n" * 5000
    )
    huge_header = b"Subject: " + b"x" * 1_000_000 + b"\n\nbody"
    bad_charset = b"Content-Type: text/plain; charset=no-such-charset\n\n550 5.1.1 gone\n"
    many_parts = b"Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n" + (
        b"--b\nContent-Type: message/delivery-status\n\nAction: failed\nStatus: 5.1.1\n\n" * 2000
    )
    for data in (deep, huge_header, bad_charset, many_parts, b"", b"\xff\xfe\x00" * 1000):
        assert classify(data, KNOWN).kind in set(ReturnKind)


# --- issue 34: replies, slow shapes --------------------------------------------------


def test_a_reply_that_quotes_the_footer_is_for_a_person() -> None:
    """An Outlook-style reply (no "> " quoting) to the From address, the digest's text
    footer with its unsubscribe mailto below the person's words: not an unsubscribe,
    for the person wrote to us and did not ask to leave."""
    original = (
        "-----Original Message-----\nFrom: Research Digest <unsubscribe@lab.example.org>\n"
        "Subject: 3 new entries\n\nA paper\n\nUnsubscribe: "
        f"mailto:unsubscribe@lab.example.org?subject=unsubscribe%20{ADA_TOKEN}\n"
    )
    replies = [
        _mail("RE: 3 new entries", "I want to keep getting these, thanks!\n\n" + original),
        _mail("Re: 3 new entries", f"Please keep me on the list.\nunsubscribe {ADA_TOKEN}\n"),
        _mail(f"Re: 3 new entries unsubscribe {ADA_TOKEN}", "Keep them coming."),
    ]
    for data in replies:
        assert classify(data, KNOWN).kind is ReturnKind.OTHER, data
    # The request itself, with a signature or a quote below it, still counts.
    for body in (f"unsubscribe {ADA_TOKEN}\n\n-- \nAda\nSent from my phone\n", f"unsubscribe {ADA_TOKEN}\n> old\n"):
        found = classify(_mail("please", body), KNOWN)
        assert (found.kind, found.token) == (ReturnKind.UNSUBSCRIBE, ADA_TOKEN), body


MB = 1_000_000
_BOUNCE_HEAD = (
    b"From: MAILER-DAEMON@relay.example.org\r\nTo: bounces@lab.example.org\r\n"
    b"Subject: Undelivered Mail Returned to Sender\r\nMIME-Version: 1.0\r\n"
)


def returned_shapes(size: int) -> dict[str, bytes]:
    """What anyone can mail the bounce address, *size* bytes of each risky shape."""
    plain = _BOUNCE_HEAD + b"Content-Type: text/plain\r\n\r\n"
    boundary = b"b"
    parts = b"".join(b"--b\r\nContent-Type: text/plain\r\n\r\n" + b"\n" * 100 + b"\r\n" for _ in range(size // 140))
    return {
        "newlines": plain + b"\n" * size,
        "CRLFs": plain + b"\r\n" * (size // 2),
        "blank lines with spaces": plain + b" \n" * (size // 2),
        "header-like lines": plain + b"a: b\n" * (size // 5),
        "status codes": plain + b"550 5.1.1 " * (size // 10),
        "addresses": plain + b"<a@b.c> " * (size // 8),
        "many parts": _BOUNCE_HEAD + b"Content-Type: multipart/mixed; boundary=" + boundary + b"\r\n\r\n" + parts,
        "base64 newlines": plain.replace(b"text/plain", b"text/plain\r\nContent-Transfer-Encoding: base64")
        + __import__("base64").encodebytes(b"\n" * (size * 3 // 4)),
        "header folds": _BOUNCE_HEAD.replace(b"MIME", b"X-Long: a\r\n" + b" a\r\n" * (size // 4) + b"MIME")
        + b"\r\ntext",
    }


@pytest.mark.slow
def test_the_classifier_runs_in_linear_time() -> None:
    """1 MB of each shape within ten times a normal 1 MB bounce (a DSN with the digest it
    returns attached), among them a megabyte of newlines, which a quadratic reader takes
    seconds to minutes on."""
    import time

    line = b"Some words of the digest it returns, as a bounce quotes it, about eighty bytes.\r\n"
    normal = (RETURNS / "postfix_hard.eml").read_bytes().replace(b"The mail system", line * (MB // len(line)), 1)

    def timed(data: bytes) -> float:
        started = time.perf_counter()
        classify(data, KNOWN)
        return time.perf_counter() - started

    baseline = min(timed(normal) for _ in range(3))
    slow = {}
    for shape, data in returned_shapes(MB).items():
        spent = min(timed(data) for _ in range(2))
        if spent > 10 * baseline + 0.5:
            slow[shape] = round(spent, 2)
    assert not slow, f"a normal 1 MB bounce takes {baseline:.3f} s: {slow}"


@pytest.mark.parametrize("sender", ["", " ", "<<>>", '"', "\t,"])
def test_a_from_no_address_can_be_read_from_is_no_sender_and_logs_nothing(
    sender: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 47, item 14: an empty From: made flufl.bounce log ERROR with a traceback at
    the default level, once per message, and the message went unread."""
    import logging

    from bot import logs

    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("flufl.bounce").level)
    logs.configure(0, "text", daemon=True)
    raw = (
        f"From: {sender}\nTo: {BOUNCES}\nSubject: Undelivered Mail Returned to Sender\n"
        "Content-Type: multipart/report; report-type=delivery-status; boundary=b\n\n"
        "--b\nContent-Type: text/plain\n\nThe mail system\n--b\nContent-Type: message/delivery-status\n\n"
        "Reporting-MTA: dns; mx.example.org\n\nFinal-Recipient: rfc822; ada@example.org\nAction: failed\n"
        "Status: 5.1.1\nDiagnostic-Code: smtp; 550 5.1.1 no such user\n--b--\n"
    ).encode()
    try:
        found = classify(raw, KNOWN)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("flufl.bounce").setLevel(saved[2])
    assert (found.kind, found.addresses, found.status) == (ReturnKind.HARD, ("ada@example.org",), "5.1.1")
    assert capsys.readouterr().err == ""
