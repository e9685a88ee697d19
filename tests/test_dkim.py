"""DKIM: spliced and simple messages signed with RSA-2048 and Ed25519 keys verify with
dkimpy against the public key (a DNS look-up function injected: no network), one
changed byte breaks them, and what reaches the SMTP server verifies too."""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dkim
import pytest
from nacl.signing import SigningKey
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import ConfigError, DkimConfig, Settings
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_file
from bot.mail.dkim import SIGNED_HEADERS, signer_of
from bot.mail.mailer import Mailer
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.digests import get_digest
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tools.sink import Sink
from tests.conftest import ROOT
from tests.helpers import settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)
OPENSSL = shutil.which("openssl")


def rsa_key(folder: Path) -> tuple[Path, bytes]:
    """A 2,048-bit RSA key in PEM, and its DNS record."""
    if OPENSSL is None:
        pytest.skip("no openssl here to make an RSA key (Debian: apt-get install openssl)")
    key = folder / "rsa.pem"
    subprocess.run([OPENSSL, "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    public = subprocess.run(
        [OPENSSL, "rsa", "-in", str(key), "-pubout", "-outform", "DER"], check=True, capture_output=True
    ).stdout
    return key, b"v=DKIM1; k=rsa; p=" + base64.b64encode(public)


def ed25519_key(folder: Path) -> tuple[Path, bytes]:
    """An Ed25519 key as dknewkey writes it (base64 of the seed), and its DNS record."""
    signing = SigningKey.generate()
    key = folder / "ed25519.key"
    key.write_bytes(base64.b64encode(bytes(signing)) + b"\n")
    return key, b"v=DKIM1; k=ed25519; p=" + base64.b64encode(bytes(signing.verify_key))


KEYS = {"rsa-sha256": rsa_key, "ed25519-sha256": ed25519_key}


def dkim_settings(tmp_path: Path, algorithm: str, key: Path, port: int = 1025) -> Settings:
    return settings_for(
        tmp_path,
        sender={"from_address": "digest@bot.example", "from_name": "Research Digest"},
        web={"public_url": "https://digest.example.org", "signing_key": "d" * 32},
        smtp={"port": port},
        dkim={"domain": "bot.example", "selector": "s2026", "key_file": str(key), "algorithm": algorithm},
    )


def dns(record: bytes):  # noqa: ANN201 - dkimpy's dnsfunc
    def lookup(name: bytes, timeout: int = 5) -> bytes:
        assert name == b"s2026._domainkey.bot.example."
        return record

    return lookup


def planned(factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]) -> list[int]:
    people = [clean_fields(f"r{n}@example.org", name=f"Reader Ünal {n}", filter="*") for n in range(3)]
    save(factory, settings, people, NOW - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=NOW, rules=RULES)
    return list(plan(factory, settings, RULES, now=NOW, all_due=True).planned)


def built_messages(factory: sessionmaker[Session], settings: Settings, seed_files: list[Path]) -> list[bytes]:
    """The planned digests' messages as a batch builds them (spliced), then the first
    one again by the simple path; asserts all three readers' bodies were spliced."""
    ids = planned(factory, settings, seed_files)
    mailer = Mailer(Parts(settings))
    with factory() as session:
        rows = [r for r in (get_digest(session, i) for i in ids) if r is not None]
        built = [b.data for b in mailer.build(session, rows, NOW)] + [mailer.message_bytes(session, rows[0], NOW)[0]]
    assert mailer.spliced == 3 and all(isinstance(data, bytes) for data in built)
    return [data for data in built if isinstance(data, bytes)]


@pytest.mark.parametrize("algorithm", list(KEYS))
def test_spliced_and_simple_messages_verify_and_a_changed_byte_does_not(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path], algorithm: str
) -> None:
    key, record = KEYS[algorithm](tmp_path)
    settings = dkim_settings(tmp_path, algorithm, key)
    for data in built_messages(factory, settings, seed_files):
        assert data.startswith(b"DKIM-Signature: v=1; a=" + algorithm.encode())
        assert dkim.verify(data, dnsfunc=dns(record))
        header = data.split(b"\r\n\r\n", 1)[0].decode()
        signed = header.split(" h=", 1)[1].split(";", 1)[0].replace("\r\n", "").replace(" ", "").split(":")
        assert [h.casefold() for h in signed] == [h.decode().casefold() for h in SIGNED_HEADERS]
        assert "c=relaxed/simple" in header and "d=bot.example" in header and "s=s2026" in header
        body = data.split(b"\r\n\r\n", 1)[1]  # what simple body canonicalization relies on
        assert b" \r\n" not in body and b"\t\r\n" not in body and b"\t" not in body
        refolded = data.replace(b"\r\nSubject: ", b"\r\nsubject:\r\n\t  ", 1)  # what relays may do to headers
        assert refolded != data and dkim.verify(refolded, dnsfunc=dns(record))
        for old, new in [
            (b"Subject: ", b"Subject:  X"),
            (b"To: ", b"To: x"),
            (b"List-Unsubscribe: <https", b"List-Unsubscribe: <http"),
        ]:
            assert not dkim.verify(data.replace(old, new, 1), dnsfunc=dns(record)), old
        body_at = data.index(b"\r\n\r\n") + 200
        changed = data[:body_at] + bytes([data[body_at] ^ 1]) + data[body_at + 1 :]
        assert not dkim.verify(changed, dnsfunc=dns(record))


@pytest.mark.parametrize("algorithm", list(KEYS))
def test_what_reaches_the_server_verifies(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path], sink: Sink, algorithm: str
) -> None:
    key, record = KEYS[algorithm](tmp_path)
    settings = dkim_settings(tmp_path, algorithm, key, port=sink.port)
    planned(factory, settings, seed_files)
    report = asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: NOW))
    assert report.sent == 3 and len(sink.received) == 3
    assert {r.helo for r in sink.received} == {"bot.example"}  # delivery greets with the From domain
    for received in sink.received:
        assert dkim.verify(received.data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"), dnsfunc=dns(record))


def test_a_missing_or_wrong_key_is_one_configuration_error(tmp_path: Path) -> None:
    assert signer_of(DkimConfig()) is None  # off by default
    with pytest.raises(ConfigError, match="needs dkim.selector and dkim.key_file"):
        signer_of(DkimConfig(domain="bot.example"))
    with pytest.raises(ConfigError, match="dkim.key_file: cannot read .*nothing.pem"):
        signer_of(DkimConfig(domain="bot.example", selector="s", key_file=tmp_path / "nothing.pem"))
    with pytest.raises(ConfigError, match="dkim.key_file: /dev/zero is not a regular file"):
        signer_of(DkimConfig(domain="bot.example", selector="s", key_file=Path("/dev/zero")))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key\n")
    for algorithm, kind in [("rsa-sha256", "an RSA private key in PEM"), ("ed25519-sha256", "a base64 Ed25519")]:
        with pytest.raises(ConfigError, match=f"does not hold {kind}"):
            signer_of(DkimConfig(domain="bot.example", selector="s", key_file=junk, algorithm=algorithm))  # type: ignore[arg-type]


def test_the_cli_stops_on_a_bad_dkim_setting_with_one_line(tmp_path: Path) -> None:
    import os

    from tests.helpers import Cli

    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env.update({"DIGESTBOT_PATHS__VAR_DIR": str(tmp_path), "DIGESTBOT_DKIM__DOMAIN": "bot.example"})
    for extra, said in [
        ({}, "error: dkim: signing needs dkim.selector and dkim.key_file as well as dkim.domain"),
        (
            {"DIGESTBOT_DKIM__SELECTOR": "s", "DIGESTBOT_DKIM__KEY_FILE": str(tmp_path / "none.pem")},
            f"error: dkim.key_file: cannot read {tmp_path / 'none.pem'}: No such file or directory",
        ),
    ]:
        done = Cli(tmp_path, {**env, **extra}, placed=False)("send-now", "a@example.org", code=None)
        assert (done.returncode, " ".join(done.stderr.split())) == (2, said)


def test_a_short_rsa_key_is_refused_and_a_weak_one_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A 512-bit key is refused (receivers ignore its signatures) and a 1024-bit one warned of."""
    if OPENSSL is None:
        pytest.skip("no openssl here to make an RSA key (Debian: apt-get install openssl)")
    for bits in (512, 1024):
        key = tmp_path / f"rsa{bits}.pem"
        subprocess.run([OPENSSL, "genrsa", "-out", str(key), str(bits)], check=True, capture_output=True)
    config = DkimConfig(domain="lab.example.org", selector="s1", key_file=tmp_path / "rsa512.pem")
    with pytest.raises(ConfigError, match=r"holds a 512-bit RSA key: receivers ignore signatures of keys under 1024"):
        signer_of(config)
    with caplog.at_level("WARNING"):
        assert signer_of(config.model_copy(update={"key_file": tmp_path / "rsa1024.pem"})) is not None
    assert "holds a 1024-bit RSA key; 2048 bits are recommended" in caplog.text


def test_a_fifo_as_the_key_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO where the key file should be is refused at once: reading it would wait for a
    writer for ever and hang every command."""
    import os
    import time

    fifo = tmp_path / "key.pem"
    os.mkfifo(fifo)
    config = DkimConfig(domain="lab.example.org", selector="s1", key_file=fifo)
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"is not a regular file"):
        signer_of(config)
    assert time.monotonic() - started < 5


# Mail::DKIM (Perl, what SpamAssassin and Amavis verify with), its DNS look-up replaced by
# the record given: an independent verifier of what we sign.
MAIL_DKIM = r"""
use strict; use Mail::DKIM::Verifier; use Net::DNS;
no warnings 'redefine';
*Mail::DKIM::DNS::query = sub {
    my ($domain, $type) = @_;
    $@ = 'NOERROR';
    my ($selector) = split /\./, $domain;
    my $record = $ENV{"DKIM_RECORD_$selector"} // $ENV{DKIM_RECORD};
    return (Net::DNS::RR->new(name => $domain, type => 'TXT', txtdata => $record));
};
my $dkim = Mail::DKIM::Verifier->new();
binmode STDIN;
while (my $line = <STDIN>) { $line =~ s/\015?\012\z/\015\012/; $dkim->PRINT($line); }
$dkim->CLOSE;
print $dkim->result, " ", ($dkim->result_detail || ""), "\n";
print $_->algorithm, "=", $_->result, " ", ($_->result_detail || ""), "\n" for $dkim->signatures;
"""


def _perl_has_mail_dkim() -> bool:
    perl = shutil.which("perl")
    return perl is not None and subprocess.run([perl, "-MMail::DKIM::Verifier", "-e", "1"], check=False).returncode == 0


@pytest.mark.skipif(
    not _perl_has_mail_dkim(), reason="no Perl Mail::DKIM here (Debian: apt-get install libmail-dkim-perl)"
)
@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_mail_dkim_verifies_the_rsa_signatures(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    key, record = rsa_key(tmp_path)
    built = built_messages(factory, dkim_settings(tmp_path, "rsa-sha256", key), seed_files)
    env = {"PATH": "/usr/bin:/bin", "DKIM_RECORD": record.decode()}
    for data in built:
        for message, expected in ((data, "pass"), (data.replace(b"Subject: ", b"Subject: X", 1), "fail")):
            done = subprocess.run(
                ["perl", "-e", MAIL_DKIM], input=message, capture_output=True, env=env, timeout=60, check=False
            )
            assert done.stdout.decode().split(" ")[0] == expected, (done.stdout, done.stderr[-500:])


def _dual_settings(tmp_path: Path) -> tuple[Settings, dict[bytes, bytes]]:
    """RSA as the key and Ed25519 as an additional one (RFC 8463), and both DNS records."""
    rsa, rsa_record = rsa_key(tmp_path)
    ed, ed_record = ed25519_key(tmp_path)
    values = dkim_settings(tmp_path, "rsa-sha256", rsa).model_dump()
    values["dkim"]["additional_keys"] = [{"selector": "e2026", "key_file": str(ed), "algorithm": "ed25519-sha256"}]
    return Settings.model_validate(values), {b"s2026": rsa_record, b"e2026": ed_record}


def _signatures(data: bytes) -> list[bytes]:
    head = data.split(b"\r\n\r\n", 1)[0].replace(b"\r\n ", b" ").replace(b"\r\n\t", b" ")
    return [line for line in head.split(b"\r\n") if line.startswith(b"DKIM-Signature:")]


def test_rsa_and_ed25519_together_both_verify(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    settings, records = _dual_settings(tmp_path)

    def lookup(name: bytes, timeout: int = 5) -> bytes:
        selector, _, rest = name.partition(b"._domainkey.")
        assert rest == b"bot.example."
        return records[selector]

    for data in built_messages(factory, settings, seed_files):
        signatures = _signatures(data)
        assert len(signatures) == 2 and b"a=rsa-sha256" in signatures[0] and b"a=ed25519-sha256" in signatures[1]
        checked = dkim.DKIM(data)
        assert checked.verify(idx=0, dnsfunc=lookup) and checked.verify(idx=1, dnsfunc=lookup)
        changed = data.replace(b"Subject: ", b"Subject: X", 1)
        assert not dkim.DKIM(changed).verify(idx=0, dnsfunc=lookup)
        assert not dkim.DKIM(changed).verify(idx=1, dnsfunc=lookup)


def test_an_additional_key_that_cannot_sign_is_one_configuration_error(tmp_path: Path) -> None:
    key, _ = ed25519_key(tmp_path)
    junk = tmp_path / "junk.key"
    junk.write_text("not a key\n")
    config = DkimConfig.model_validate(
        {
            "domain": "bot.example",
            "selector": "e1",
            "key_file": str(key),
            "algorithm": "ed25519-sha256",
            "additional_keys": [{"selector": "r1", "key_file": str(junk), "algorithm": "rsa-sha256"}],
        }
    )
    with pytest.raises(ConfigError, match=r"^dkim.additional_keys\[0\].key_file: .*junk.key does not hold an RSA"):
        signer_of(config)


@pytest.mark.skipif(
    not _perl_has_mail_dkim(), reason="no Perl Mail::DKIM here (Debian: apt-get install libmail-dkim-perl)"
)
@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_mail_dkim_passes_a_message_signed_with_both(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path]
) -> None:
    """Debian 12's Mail::DKIM (what SpamAssassin verifies with) may not know Ed25519:
    signed with both, the message still passes there, on its RSA signature."""
    settings, records = _dual_settings(tmp_path)
    data = built_messages(factory, settings, seed_files)[0]
    env = {"PATH": "/usr/bin:/bin", **{f"DKIM_RECORD_{s.decode()}": r.decode() for s, r in records.items()}}
    done = subprocess.run(["perl", "-e", MAIL_DKIM], input=data, capture_output=True, env=env, timeout=60, check=False)
    overall, *each = done.stdout.decode().splitlines()
    assert overall.split(" ")[0] == "pass", (done.stdout, done.stderr[-500:])
    assert any(line.startswith("rsa-sha256=pass") for line in each), each
    ed25519 = next(line for line in each if line.startswith("ed25519-sha256="))
    assert ed25519.split("=")[1].split(" ")[0] in ("pass", "invalid"), ed25519  # invalid: an older Mail::DKIM
