"""``digestbot smtp test`` against real SMTP servers on 127.0.0.1 (aiosmtpd): each step
reported, the first failure ends it with exit 1, and the password never shows."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.delivery.smtp import helo_name
from bot.tools.sink import Sink, SinkHandler
from tests.helpers import NOBODY_LISTENS, Cli, CliResult

OPENSSL = shutil.which("openssl")
SECRET = "pa55-w0rd-\u00e9"


def run(*args: str, env: dict[str, str], code: int = 0, own_process: bool = False) -> CliResult:
    """``smtp test`` in the folder the test's settings name (paths.var_dir); in a process of
    its own where the test's server, in this one, logs what the client did to it."""
    cli = Cli(Path(env["DIGESTBOT_PATHS__VAR_DIR"]), env, columns=300, placed=False, own_process=own_process)
    return cli("smtp", "test", *args, code=code)


def lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [" ".join(line.split()) for line in done.stdout.splitlines()]


def test_every_step_of_a_plain_connection_and_one_test_message(tmp_path: Path, sink: Sink) -> None:
    env = {
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path),
        "DIGESTBOT_SMTP__PORT": str(sink.port),
        "DIGESTBOT_SENDER__FROM_ADDRESS": "digest@bot.example",
    }
    shown = lines(run("--to", "Ops@Example.org", env=env))
    assert shown[0] == "ok resolve 127.0.0.1 is 127.0.0.1"
    assert shown[1].startswith(f"ok connect 127.0.0.1:{sink.port}: 220 ")
    assert shown[2].startswith("ok ehlo as bot.example; the server offers ") and "SIZE" in shown[2]
    assert shown[3:6] == [
        "ok tls not used: smtp.tls = none",
        "ok auth offered: none",
        "ok login not configured (smtp.username is empty)",
    ]
    assert shown[6].startswith("ok send to Ops@example.org: ") and len(shown) == 7
    (received,) = sink.received
    assert received.recipients == ["Ops@example.org"] and received.message["Subject"] == "digestbot: SMTP test"
    assert received.helo == "bot.example"  # the From domain, never "localhost"
    assert lines(run(env=env))[-1] == "ok login not configured (smtp.username is empty)"  # no --to: nothing sent
    assert len(sink.received) == 1
    named = lines(run("--to", "ops@example.org", env={**env, "DIGESTBOT_SMTP__HELO_NAME": "mx1.bot.example"}))
    assert named[2].startswith("ok ehlo as mx1.bot.example;") and sink.received[-1].helo == "mx1.bot.example"
    refused = run(env={**env, "DIGESTBOT_SMTP__HELO_NAME": "localhost"}, code=2)
    assert "smtp.helo_name" in refused.stderr and "'localhost' is not a host name" in refused.stderr


@pytest.mark.parametrize(
    ("configured", "from_address", "fqdn", "greets"),
    [
        ("mail.example.org", "digest@example.org", "box.example.net", "mail.example.org"),  # as set
        ("", "digest@Example.ORG", "box.example.net", "example.org"),  # the From domain
        ("", "digestbot@localhost", "box.example.net", "box.example.net"),  # else this machine's name
        ("", "digestbot@localhost", "localhost.localdomain", "[127.0.0.1]"),  # never localhost
        ("", "digest@intranet", "3f2a9c", "[127.0.0.1]"),  # nor a name without a dot
        ("", "digest@printer.local", "box", "[127.0.0.1]"),
        ("", "digest@Bücher.example", "box", "xn--bcher-kva.example"),  # an IDN in its ASCII form
        ("", "digest@\udcff.example", "box.example.net", "box.example.net"),  # no IDNA form: the next one
    ],
)
def test_the_name_delivery_greets_with(configured: str, from_address: str, fqdn: str, greets: str) -> None:
    asked: list[str] = []

    def machine() -> str:
        asked.append(fqdn)
        return fqdn

    assert helo_name(configured, from_address, machine) == greets
    if greets in (configured, from_address.rpartition("@")[2].lower()):
        assert not asked  # DNS is asked for this machine's name only when it is needed


def test_login_refused_is_the_failing_step_and_the_password_never_shows(tmp_path: Path) -> None:
    with Sink(SinkHandler(), logins={"bot": SECRET}) as server:
        env = {
            "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path),
            "DIGESTBOT_SMTP__PORT": str(server.port),
            "DIGESTBOT_SMTP__USERNAME": "bot",
            "DIGESTBOT_SMTP__PASSWORD": SECRET,
        }
        accepted = run(env=env)
        good = lines(accepted)
        assert "ok login as bot" in good and any(
            line.startswith("ok auth offered: ") and "PLAIN" in line for line in good
        )
        bad = run(env={**env, "DIGESTBOT_SMTP__PASSWORD": SECRET + "x"}, code=1)
        assert lines(bad)[-1].startswith("FAIL login as bot: 535")
        for done in (accepted, bad):
            for form in (SECRET, base64.b64encode(SECRET.encode()).decode(), "pa55"):
                assert form not in done.stdout + done.stderr


def test_nothing_listening_or_no_such_host_fails_at_that_step(tmp_path: Path) -> None:
    env = {"DIGESTBOT_PATHS__VAR_DIR": str(tmp_path), "DIGESTBOT_SMTP__PORT": str(NOBODY_LISTENS)}
    shown = lines(run(env=env, code=1))
    assert shown[0].startswith("ok resolve") and shown[1].startswith("FAIL connect 127.0.0.1:") and len(shown) == 2
    nowhere = lines(run(env={**env, "DIGESTBOT_SMTP__HOST": "no-such-host.invalid"}, code=1))
    assert nowhere == [nowhere[0]] and nowhere[0].startswith("FAIL resolve no-such-host.invalid: ")
    bad = run("--to", "not an address", env=env, code=2)
    assert bad.stderr.startswith("error: --to: 'not an address'") and bad.stderr.count("\n") == 1


@pytest.fixture
def certificate(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    if OPENSSL is None:
        pytest.skip("no openssl here to make a certificate (Debian: apt-get install openssl)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    yield cert, key


def test_starttls_reports_the_version_and_the_certificate(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with Sink(SinkHandler(), tls_context=context) as server:
        env = {"DIGESTBOT_PATHS__VAR_DIR": str(tmp_path), "DIGESTBOT_SMTP__PORT": str(server.port)}
        plain = lines(run(env=env))
        assert "ok tls not used: smtp.tls = none (the server offers STARTTLS: set smtp.tls = starttls)" in plain
        env["DIGESTBOT_SMTP__TLS"] = "starttls"
        untrusted = lines(run(env=env, code=1, own_process=True))  # the server logs the broken handshake
        assert untrusted[-1].startswith(f"FAIL connect 127.0.0.1:{server.port} (TLS handshake): ")
        assert "certificate verify failed" in untrusted[-1]
        unchecked = lines(run(env={**env, "DIGESTBOT_SMTP__VERIFY_CERTIFICATES": "false"}))
        assert any(line.startswith("ok tls TLSv1.") and "certificate not checked" in line for line in unchecked)
        trusted = lines(run(env={**env, "SSL_CERT_FILE": str(cert)}))
        assert any(
            line.startswith("ok tls TLSv1.")
            and "certificate commonName=localhost, issued by commonName=localhost" in line
            for line in trusted
        ), trusted
