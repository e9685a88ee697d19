"""Reading returned mail over IMAP with TLS from a real Dovecot on 127.0.0.1, started
here with a configuration in a temporary folder (Debian: dovecot-imapd)."""

from __future__ import annotations

import imaplib
import os
import pwd
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import ReturnKind, SubscriberStatus
from bot.returns.inbox_reading import read_inbox, reading_of
from bot.returns.mailboxes import ImapBox, MailboxError, open_mailbox
from bot.tools.sink import free_port
from tests.helpers import Cli
from tests.returned_mail import BOUNCES, KEY, PEOPLE, RETURNS, UNSUBSCRIBE, add_people, statuses

DOVECOT = shutil.which("dovecot") or ("/usr/sbin/dovecot" if Path("/usr/sbin/dovecot").exists() else None)
OPENSSL = shutil.which("openssl")
USER, PASSWORD = "digest", "s3cret-imap-pass"

CONFIG = """\
base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = required
ssl_cert = <{d}/cert.pem
ssl_key = <{d}/key.pem
auth_mechanisms = plain
# A wrong password is refused at once (Dovecot waits 2 s by default): the test needs no brute-force guard.
auth_failure_delay = 0
first_valid_uid = 1
{users}
mail_location = maildir:{d}/mail/%u
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {d}/passwd
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={d}/home/%u
}}
service imap-login {{
  inet_listener imap {{
    port = 0
  }}
  inet_listener imaps {{
    port = {port}
    ssl = yes
  }}
}}
service stats {{
  unix_listener stats-reader {{
    mode = 0666
  }}
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
"""


@dataclass
class Dovecot:
    port: int
    folder: Path
    process: subprocess.Popen[bytes]

    def client(self) -> imaplib.IMAP4_SSL:
        context = ssl.create_default_context(cafile=str(self.folder / "cert.pem"))
        imap = imaplib.IMAP4_SSL("127.0.0.1", self.port, ssl_context=context, timeout=10)
        imap.login(USER, PASSWORD)
        return imap

    def append(self, *names: str, folder: str = "INBOX") -> None:
        imap = self.client()
        for name in names:
            imap.append(folder, None, None, (RETURNS / name).read_bytes().replace(b"\n", b"\r\n"))
        imap.logout()

    def flags(self, folder: str = "INBOX") -> dict[str, str]:
        """Subject -> flags of every message in *folder*."""
        imap = self.client()
        imap.select(f'"{folder}"', readonly=True)
        _, found = imap.uid("SEARCH", "ALL")
        result: dict[str, str] = {}
        for uid in (found[0] or b"").split():
            _, data = imap.uid("FETCH", uid, "(FLAGS BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
            flags = data[0][0].decode() if isinstance(data[0], tuple) else ""
            subject = data[0][1].decode().strip() if isinstance(data[0], tuple) else ""
            result[subject.removeprefix("Subject: ")] = "Seen" if "\\Seen" in flags else "unseen"
        imap.logout()
        return result


@pytest.fixture
def dovecot() -> Iterator[Dovecot]:
    if DOVECOT is None:
        pytest.skip("no dovecot here (Debian: apt-get install dovecot-imapd; .ci/run installs it)")
    if OPENSSL is None:
        pytest.skip("no openssl here to make the server's certificate (Debian: apt-get install openssl)")
    # Dovecot's processes run as other users: the folder must be open to them, unlike pytest's.
    folder = Path(tempfile.mkdtemp(prefix="digestbot-dovecot-"))
    folder.chmod(0o755)
    server: Dovecot | None = None
    try:
        server = _start(folder)
        yield server
    finally:
        if server is not None:
            server.process.terminate()
            server.process.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def _start(folder: Path) -> Dovecot:
    subprocess.run(
        [OPENSSL or "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
        + ["-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem")],
        check=True,
        capture_output=True,
    )
    for name in ("mail", "home", "run", "state"):
        (folder / name).mkdir()
    if os.geteuid() == 0:
        uid = gid = 65534  # nobody: Dovecot refuses to keep mail as root
        users = ""
        for name in ("mail", "home"):
            os.chown(folder / name, uid, gid)
    else:
        uid, gid = os.getuid(), os.getgid()
        me = pwd.getpwuid(uid).pw_name
        users = f"default_internal_user = {me}\ndefault_login_user = {me}\ndefault_internal_group = {me}"
    (folder / "passwd").write_text(f"{USER}:{{PLAIN}}{PASSWORD}::::::\n")
    port = free_port()
    config = CONFIG.format(d=folder, port=port, uid=uid, gid=gid, users=users)
    (folder / "dovecot.conf").write_text(config)
    errors = (folder / "stderr.txt").open("w")
    process = subprocess.Popen(  # in the foreground: a daemon would hold our pipes open
        [DOVECOT or "dovecot", "-F", "-c", str(folder / "dovecot.conf")], stdout=errors, stderr=errors
    )
    server = Dovecot(port, folder, process)
    deadline = time.monotonic() + 15
    while True:
        if process.poll() is not None:
            pytest.skip(f"dovecot does not start here: {(folder / 'stderr.txt').read_text().strip()[:200]}")
        try:
            server.client().logout()
            return server
        except (OSError, imaplib.IMAP4.error):
            if time.monotonic() > deadline:
                log = (folder / "dovecot.log").read_text() if (folder / "dovecot.log").exists() else ""
                raise AssertionError(f"dovecot did not answer: {log[-500:]}") from None
            time.sleep(0.2)


def inbox_settings(server: Dovecot, **inbox: object) -> Settings:
    secret = server.folder / "imap.password"
    secret.write_text(PASSWORD + "\n")
    return Settings.model_validate(
        {
            "sender": {"bounce_address": BOUNCES, "unsubscribe_address": UNSUBSCRIBE},
            "inbox": {
                "url": f"imaps://{USER}@localhost:{server.port}/INBOX",
                "password_file": str(secret),
                "verify_certificates": False,
                **inbox,
            },
        }
    )


def test_returned_mail_is_read_over_imap_and_marked_seen_after_commit(
    dovecot: Dovecot, factory: sessionmaker[Session]
) -> None:
    add_people(factory)
    dovecot.append("sendmail_hard.eml", "arf_abuse.eml", "out_of_office.eml", "person_question.eml")
    settings = inbox_settings(dovecot)
    report = read_inbox(factory, open_mailbox(settings.inbox), reading_of(settings, KEY))
    assert (report.read, report.left, report.kinds) == (4, 2, {ReturnKind.HARD: 1, ReturnKind.COMPLAINT: 1})
    assert statuses(factory)[PEOPLE[8]] is SubscriberStatus.BOUNCED
    assert statuses(factory)[PEOPLE[7]] is SubscriberStatus.UNSUBSCRIBED
    assert dovecot.flags() == {
        "Returned mail: see transcript for details": "Seen",
        "FW: Your research digest: 12 new entries": "Seen",
        "Automatic reply: Your research digest: 12 new entries": "unseen",  # never read by BODY.PEEK
        "how do I change my filter?": "unseen",
    }
    again = read_inbox(factory, open_mailbox(settings.inbox), reading_of(settings, KEY))
    assert (again.read, sum(again.kinds.values())) == (2, 0)


def test_other_mail_is_moved_unread_to_the_named_folder(dovecot: Dovecot, factory: sessionmaker[Session]) -> None:
    add_people(factory)
    dovecot.append("person_question.eml", "ses_hard.eml")
    settings = inbox_settings(dovecot, other_folder="For people")
    read_inbox(factory, open_mailbox(settings.inbox), reading_of(settings, KEY))
    assert dovecot.flags() == {"Delivery Status Notification (Failure)": "Seen"}
    assert dovecot.flags("For people") == {"how do I change my filter?": "unseen"}


@pytest.mark.slow
def test_a_wrong_password_or_folder_is_one_line_without_the_password(dovecot: Dovecot) -> None:
    settings = inbox_settings(dovecot)
    (dovecot.folder / "imap.password").write_text("not-the-password")
    with pytest.raises(MailboxError) as refused:
        ImapBox(settings.inbox)
    message = str(refused.value)
    assert message.startswith(f"inbox.url: localhost:{dovecot.port}: ") and "\n" not in message
    assert "not-the-password" not in message and PASSWORD not in message
    settings = inbox_settings(dovecot)
    wrong = settings.inbox.model_copy(update={"url": f"imaps://{USER}@localhost:{dovecot.port}/Nope"})
    with pytest.raises(MailboxError, match="has no folder 'Nope'"):
        ImapBox(wrong)


def test_certificates_are_verified_unless_told_not_to(dovecot: Dovecot) -> None:
    settings = inbox_settings(dovecot)
    verified = settings.inbox.model_copy(update={"verify_certificates": True})
    with pytest.raises(MailboxError, match="cannot connect.*certificate verify failed: self.signed certificate"):
        ImapBox(verified)


def test_bounces_fetch_reads_imap_with_the_password_from_the_environment(dovecot: Dovecot, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
        "DIGESTBOT_INBOX__URL": f"imaps://{USER}@localhost:{dovecot.port}/INBOX",
        "DIGESTBOT_INBOX__VERIFY_CERTIFICATES": "false",
        "DIGESTBOT_INBOX__PASSWORD": PASSWORD,
    }
    dovecot.append("exim_hard.eml", "person_question.eml")
    done = Cli(tmp_path, env, placed=False)("bounces", "fetch")
    assert done.stdout.splitlines()[0] == "read 2 messages: 1 hard bounce; 1 left for a person; 0 read before"
    env["DIGESTBOT_INBOX__PASSWORD"] = "wrong-" + PASSWORD
    done = Cli(tmp_path, env, placed=False)("bounces", "fetch", code=1)
    assert done.returncode == 1 and done.stderr.startswith("error: inbox.url: localhost:")
    assert PASSWORD not in done.stderr + done.stdout and "Traceback" not in done.stderr
