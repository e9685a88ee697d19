"""Secrets stay secret: the SMTP password, the link-signing key and database
passwords never appear in logs, CLI output, stored errors or error messages,
above all on the failure paths where a careless message would quote them.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiosmtpd.smtp import AuthResult
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import ConfigError, Settings, load_settings
from bot.delivery.loop import deliver_now
from bot.domain import DeliverReport
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.digests import list_digests
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tokens import signing_key
from bot.tools.sink import Sink, SinkHandler
from tests.conftest import ROOT, SEEDS
from tests.helpers import DIGESTBOT, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)
PASSWORD = "pw-Secret-7f3a9c"
SIGNING_KEY = "key-Secret-0b1d2e3f4a5b6c7d"
DB_PASSWORD = "db-Secret-5e6f"


def forms_of(secret: str, user: str = "bot") -> list[str]:
    """The secret as it could leak: plain, and as SMTP AUTH PLAIN/LOGIN carry it."""
    return [
        secret,
        base64.b64encode(secret.encode()).decode(),
        base64.b64encode(f"\0{user}\0{secret}".encode()).decode(),
    ]


def assert_absent(text: str, *secrets: str) -> None:
    for secret in secrets:
        for form in forms_of(secret):
            assert form not in text, f"secret leaked as {form!r}"


def _settings(tmp_path: Path, port: int, password: str) -> Settings:
    return settings_for(
        tmp_path,
        smtp={"port": port, "timeout_seconds": 5, "username": "bot", "password": SecretStr(password)},
        web={"signing_key": SecretStr(SIGNING_KEY), "public_url": "https://digest.example.org"},
    )


def _one_digest_to_ada(factory: sessionmaker[Session], settings: Settings, dump: Path) -> DeliverReport:
    """Subscribe ada, ingest *dump*, plan her digest and try to deliver it once."""
    save(factory, settings, [clean_fields("ada@example.org")], DAY - timedelta(days=1))
    ingest_file(factory, dump, now=DAY, rules=RULES)
    plan(factory, settings, RULES, now=DAY, all_due=True)
    return asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: DAY))


def test_a_refused_login_logs_and_stores_no_password(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, aiosmtplib's protocol traces included
    with Sink(SinkHandler(), logins={"bot": PASSWORD}) as sink:
        wrong = _settings(tmp_path, sink.port, PASSWORD + "-wrong")
        refused = _one_digest_to_ada(factory, wrong, seed_files[0])
        assert (refused.sent, refused.retrying) == (0, 1)
        with factory() as session:
            (digest,) = list_digests(session)
        assert "535" in (digest.last_error or "") or "auth" in (digest.last_error or "").lower()
        assert_absent(f"{digest.last_error}\n{caplog.text}", PASSWORD + "-wrong", PASSWORD, SIGNING_KEY)

        right = _settings(tmp_path, sink.port, PASSWORD)
        later = DAY + timedelta(hours=3)
        assert asyncio.run(deliver_now(factory, Parts(right), clock=lambda: later)).sent == 1  # the login works at all
        assert len(sink.received) == 1
    assert_absent(caplog.text + sink.received[0].data.decode("ascii", "replace"), PASSWORD, SIGNING_KEY)


def echoing_authenticator(
    server: object, session: object, envelope: object, mechanism: str, auth_data: object
) -> AuthResult:
    """A server that quotes the AUTH argument back in its 535 reply, as some do."""
    login = getattr(auth_data, "login", b"") or b""
    password = getattr(auth_data, "password", b"") or b""
    echoed = base64.b64encode(b"\0" + login + b"\0" + password).decode()
    return AuthResult(
        success=False,
        handled=False,
        message=f"535 5.7.8 {echoed} {password.decode()} is not a valid login for {login.decode()}",
    )


def test_a_server_that_echoes_the_credentials_is_not_quoted(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with Sink(SinkHandler(), logins={}, authenticator=echoing_authenticator) as sink:
        report = _one_digest_to_ada(factory, _settings(tmp_path, sink.port, PASSWORD), seed_files[0])
    assert (report.sent, report.retrying) == (0, 1)
    with factory() as session:
        (digest,) = list_digests(session)
        stored = "\n".join(str(v) for row in session.execute(text("SELECT * FROM digests")) for v in row)
    assert "login refused (535)" in (digest.last_error or "")
    ours = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("mail.log"))  # not the server's
    assert "535" in ours  # aiosmtplib's and our own records are there to be searched
    assert_absent(f"{digest.last_error}\n{stored}\n{ours}", PASSWORD)


@pytest.mark.slow
def test_cli_output_and_history_carry_no_secrets(tmp_path: Path) -> None:
    with Sink(SinkHandler(), logins={"bot": PASSWORD}) as sink:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
        env |= {
            "DIGESTBOT_DATABASE__URL": f"sqlite:///{tmp_path / 's.sqlite3'}",
            "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
            "DIGESTBOT_PATHS__DUMP_DIR": str(SEEDS),
            "DIGESTBOT_SMTP__PORT": str(sink.port),
            "DIGESTBOT_SMTP__TIMEOUT_SECONDS": "5",
            "DIGESTBOT_SMTP__USERNAME": "bot",
            "DIGESTBOT_SMTP__PASSWORD": PASSWORD + "-wrong",
            "DIGESTBOT_WEB__SIGNING_KEY": SIGNING_KEY,
            "COLUMNS": "250",
        }

        def run(*args: str) -> str:
            proc = subprocess.run(
                [DIGESTBOT, "-v", *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
            )
            return proc.stdout + proc.stderr

        seen = run("subscribers", "add", "ada@example.org")
        seen += run("dumps", "ingest")
        seen += run("run", "--once", "--all-due")
        seen += run("history")
        seen += run("history", "--json")
        seen += run("config", "show")
        seen += run("stats")
        assert "retry" in seen.lower()  # the refused login did happen and was reported
        assert "***" in run("config", "show")
    assert_absent(seen, PASSWORD + "-wrong", SIGNING_KEY)


def test_database_password_is_not_printed_when_the_server_is_unreachable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env["DIGESTBOT_DATABASE__URL"] = f"postgresql+psycopg://digestbot:{DB_PASSWORD}@127.0.0.1:9/nowhere"
    for args in (["db", "upgrade"], ["subscribers", "list"], ["config", "show"]):
        proc = subprocess.run([DIGESTBOT, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert_absent(proc.stdout + proc.stderr, DB_PASSWORD)
        if args != ["config", "show"]:
            assert proc.returncode != 0 and proc.stderr.strip()


def test_config_errors_name_the_file_not_the_secret(tmp_path: Path) -> None:
    short = tmp_path / "short.key"
    short.write_text("tiny-secret", encoding="utf-8")
    settings = Settings.model_validate({"paths": {"var_dir": str(tmp_path)}, "web": {"signing_key_file": str(short)}})
    with pytest.raises(ConfigError) as info:
        signing_key(settings)
    assert str(short) in str(info.value) and "tiny-secret" not in str(info.value)

    secret_file = tmp_path / "password"
    secret_file.write_text(PASSWORD, encoding="utf-8")
    secret_file.chmod(0)
    settings = Settings.model_validate({"smtp": {"password_file": str(secret_file)}})
    if os.geteuid() != 0:  # root reads any file
        with pytest.raises(ConfigError) as info:
            settings.smtp.resolved_password()
        assert str(secret_file) in str(info.value)
    secret_file.chmod(0o600)
    assert settings.smtp.resolved_password().get_secret_value() == PASSWORD
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings.smtp.resolved_password())

    config = tmp_path / "digestbot.toml"
    config.write_text(f'[smtp]\npassword = "{PASSWORD}"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize("setting", ["web.signing_key_file", "smtp.password_file", "inbox.password_file"])
def test_a_secret_file_that_is_huge_or_not_text_is_one_error(tmp_path: Path, setting: str) -> None:
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe" + os.urandom(64))
    section, key = setting.split(".")

    def read(path: Path) -> object:
        settings = Settings.model_validate({"paths": {"var_dir": str(tmp_path)}, section: {key: str(path)}})
        if section == "web":
            return signing_key(settings)
        return settings.smtp.resolved_password() if section == "smtp" else settings.inbox.resolved_password()

    huge = tmp_path / "huge"
    huge.write_bytes(b"k" * 20_000)
    for path, said in [
        (huge, "is longer than 16 KB"),
        (binary, "is not UTF-8 text"),
        (Path("/dev/zero"), r"is not a regular file \(a FIFO, a device or a folder\)"),
    ]:
        with pytest.raises(ConfigError, match=f"^{setting}: {path} {said}$"):
            read(path)
