"""Reading returned mail from a real Maildir: each kind's effect on the subscriber, the
thresholds, once-only processing, a crash between the commit and the mark, and the
reports (``subscribers show``, ``history``, ``stats``, ``bounces fetch``)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import ReturnKind, SubscriberStatus
from bot.mail.parts import Parts
from bot.returns.inbox_reading import read_inbox, reading_of
from bot.returns.mailboxes import MailboxError, MaildirBox, open_mailbox
from bot.store.response_tables import ReturnEventRow
from bot.subscribers.subscriptions import change_status, remove
from tests.helpers import Cli, CliResult
from tests.returned_mail import KEY, PEOPLE, add_people, deliver, inbox_settings, new_maildir, seen, statuses

NOW = datetime(2026, 11, 24, 9, tzinfo=UTC)
ADA, GRACE, CAROL, BOB = PEOPLE[7], PEOPLE[8], PEOPLE[9], PEOPLE[10]


@pytest.fixture
def maildir(tmp_path: Path) -> Path:
    return new_maildir(tmp_path / "Maildir")


def read(factory: sessionmaker[Session], maildir: Path, now: datetime = NOW, **inbox: object):  # type: ignore[no-untyped-def]
    settings = inbox_settings(maildir, **inbox)
    mailbox = open_mailbox(settings.inbox)
    return read_inbox(factory, mailbox, reading_of(settings, KEY), now)


def events(factory: sessionmaker[Session]) -> int:
    """Outcomes recorded (messages left for a person are remembered as "other", not counted)."""
    with factory() as session:
        query = select(func.count()).select_from(ReturnEventRow).where(ReturnEventRow.kind != ReturnKind.OTHER.value)
        return int(session.scalar(query) or 0)


def test_each_kind_does_what_it_says(
    factory: sessionmaker[Session], maildir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add_people(factory)
    for name in ("postfix_hard.eml", "ses_hard.eml", "mangled_no_verp.eml", "arf_abuse.eml", "delayed.eml"):
        deliver(maildir, name)
    left = [deliver(maildir, "out_of_office.eml"), deliver(maildir, "person_question.eml")]
    with caplog.at_level(logging.INFO, logger="bot.returns.inbox_reading"):
        report = read(factory, maildir)
    changes = [r.getMessage() for r in caplog.records if " is now " in r.getMessage()]
    assert f"{ADA} is now unsubscribed: complaint" in changes  # a complaint has no status code to add
    assert all(line == line.rstrip() for line in changes), changes
    assert (report.read, report.left, report.repeated, report.unknown) == (7, 2, 0, 0)
    assert report.kinds == {ReturnKind.HARD: 3, ReturnKind.COMPLAINT: 1, ReturnKind.DELAYED: 1}
    # Ada's hard bounce came first and the complaint unsubscribed her after it
    assert statuses(factory) == {
        ADA: SubscriberStatus.UNSUBSCRIBED,
        GRACE: SubscriberStatus.BOUNCED,
        CAROL: SubscriberStatus.BOUNCED,  # no VERP: matched by the address
        BOB: SubscriberStatus.ACTIVE,
    }
    assert all(path.exists() for path in left), "what is for a person stays, unread, where it was"
    assert len(seen(maildir)) == 5 and not list((maildir / "cur").glob("*:2,")), "processed means Seen"
    again = read(factory, maildir)
    assert (again.read, again.left, sum(again.kinds.values())) == (2, 2, 0)


def test_the_same_message_twice_is_recorded_once(factory: sessionmaker[Session], maildir: Path) -> None:
    add_people(factory)
    deliver(maildir, "soft_mailbox_full.eml")
    deliver(maildir, "soft_mailbox_full.eml")  # delivered twice (a retrying MTA, a copied file)
    report = read(factory, maildir)
    assert (report.kinds, report.repeated) == ({ReturnKind.SOFT: 1}, 1)
    assert events(factory) == 1 and len(seen(maildir)) == 2


def test_hard_bounces_count_toward_the_threshold_until_resume(factory: sessionmaker[Session], maildir: Path) -> None:
    add_people(factory)
    deliver(maildir, "gmail_hard.eml")
    report = _read_with_threshold(factory, maildir, 2)
    assert report.changed == [] and statuses(factory)[ADA] is SubscriberStatus.ACTIVE
    deliver(maildir, "outlook_hard.eml")
    report = _read_with_threshold(factory, maildir, 2)
    assert report.changed == [(ADA, SubscriberStatus.BOUNCED)]
    change_status(factory, ADA, SubscriberStatus.ACTIVE, NOW)  # subscribers resume
    deliver(maildir, "postfix_hard.eml")
    assert _read_with_threshold(factory, maildir, 2).changed == [], "the bounces before resume no longer count"
    deliver(maildir, "verp_only.eml")
    assert _read_with_threshold(factory, maildir, 2).changed == [(ADA, SubscriberStatus.BOUNCED)]


def _read_with_threshold(factory: sessionmaker[Session], maildir: Path, threshold: int):  # type: ignore[no-untyped-def]
    base = inbox_settings(maildir)
    settings = base.model_copy(update={"smtp": base.smtp.model_copy(update={"bounce_threshold": threshold})})
    return read_inbox(factory, open_mailbox(settings.inbox), reading_of(settings, KEY), NOW)


def test_soft_bounces_count_within_their_window(factory: sessionmaker[Session], maildir: Path) -> None:
    add_people(factory)
    full = (Path(__file__).parent / "fixtures" / "returns" / "soft_mailbox_full.eml").read_bytes()
    days = [NOW - timedelta(days=30), NOW - timedelta(days=10), NOW - timedelta(days=1), NOW]
    for n, at in enumerate(days):
        deliver(maildir, full + f"\nX-Copy: {n}\n".encode())  # four different messages
        report = read(factory, maildir, now=at, soft_bounce_limit=3, soft_bounce_days=14)
        assert report.kinds == {ReturnKind.SOFT: 1}
        # the one 30 days ago is outside the 14-day window: the third within it is the last one
        expected = SubscriberStatus.BOUNCED if n == 3 else SubscriberStatus.ACTIVE
        assert statuses(factory)[ADA] is expected, n


def test_an_unsubscribe_mail_needs_a_valid_token(factory: sessionmaker[Session], maildir: Path) -> None:
    add_people(factory)
    forged = deliver(
        maildir,
        (Path(__file__).parent / "fixtures" / "returns" / "unsubscribe_mail.eml")
        .read_bytes()
        .replace(b"7.eIestZEUXT7FklUCuvHwQx-x", b"7.AAAAAAAAAAAAAAAAAAAAAAAA"),
    )
    report = read(factory, maildir)
    assert (report.left, events(factory), statuses(factory)[ADA]) == (1, 0, SubscriberStatus.ACTIVE)
    assert forged.exists(), "a token that is nobody's: left for a person"
    deliver(maildir, "unsubscribe_mail.eml")
    report = read(factory, maildir)
    assert report.changed == [(ADA, SubscriberStatus.UNSUBSCRIBED)]


def test_a_bounce_for_nobody_we_know_is_recorded_and_marked(factory: sessionmaker[Session], maildir: Path) -> None:
    deliver(maildir, "exim_hard.eml")  # nobody is subscribed yet
    report = read(factory, maildir)
    assert (report.unknown, events(factory), len(seen(maildir))) == (1, 1, 1)


def test_other_mail_moves_to_the_named_folder_unread(factory: sessionmaker[Session], maildir: Path) -> None:
    add_people(factory)
    deliver(maildir, "person_question.eml")
    deliver(maildir, "postfix_hard.eml")
    read(factory, maildir, other_folder="For people")
    moved = list((maildir / ".For people" / "new").iterdir())
    assert len(moved) == 1 and b"change my filter" in moved[0].read_bytes()
    assert not list((maildir / "new").iterdir()) and len(seen(maildir)) == 1


def test_a_message_too_big_is_left_unread(factory: sessionmaker[Session], maildir: Path) -> None:
    add_people(factory)
    big = deliver(maildir, "postfix_hard.eml")
    big.write_bytes(big.read_bytes() + b"x" * 20_000)
    report = read(factory, maildir, max_message_bytes=10_000)
    assert (report.left, events(factory)) == (1, 0) and big.exists()


def test_a_missing_maildir_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MailboxError, match=r"is not a Maildir"):
        MaildirBox(tmp_path / "nope", "", 10_000)


class KilledBox(MaildirBox):
    """The fetcher dies by SIGKILL right after a commit, before it marks the message."""

    def done(self, ref: str) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_fetcher_killed_between_commit_and_mark_applies_once(factory: sessionmaker[Session], maildir: Path) -> None:
    add_people(factory)
    deliver(maildir, "gmail_hard.eml")
    settings = inbox_settings(maildir)
    child = os.fork()
    if child == 0:  # the fetcher
        try:
            read_inbox(factory, KilledBox(maildir, "", 1_000_000), reading_of(settings, KEY), NOW)
        finally:
            os._exit(3)  # never reached: killed in done()
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    factory.kw["bind"].dispose()  # connections the child shared
    assert statuses(factory)[ADA] is SubscriberStatus.BOUNCED and events(factory) == 1, "committed"
    assert not seen(maildir), "but not marked"
    report = read(factory, maildir)
    assert (report.read, report.repeated, report.kinds) == (1, 1, {})
    assert events(factory) == 1 and len(seen(maildir)) == 1 and statuses(factory)[ADA] is SubscriberStatus.BOUNCED


def test_purge_deletes_their_returned_mail(factory: sessionmaker[Session], maildir: Path) -> None:
    add_people(factory)
    deliver(maildir, "postfix_hard.eml")
    read(factory, maildir)
    remove(factory, ADA, purge=True, now=NOW)
    assert events(factory) == 0


def cli(tmp_path: Path, *args: str, env: dict[str, str]) -> CliResult:
    return Cli(tmp_path, env, placed=False)(*args, code=None)


def test_the_commands_report_what_came_back(tmp_path: Path) -> None:
    maildir = new_maildir(tmp_path / "Maildir")
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "signing.key").write_text(KEY.decode())
    env = {
        **os.environ,
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
        "DIGESTBOT_SENDER__BOUNCE_ADDRESS": "bounces@lab.example.org",
        "COLUMNS": "250",
        "DIGESTBOT_SENDER__UNSUBSCRIBE_ADDRESS": "unsubscribe@lab.example.org",
    }
    done = cli(tmp_path, "bounces", "fetch", env=env)
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "error: inbox.url is not set: nothing to read (docs/deliverability.md, 'Mail that comes back')",
    )
    env["DIGESTBOT_INBOX__URL"] = f"maildir://{tmp_path / 'missing'}"
    done = cli(tmp_path, "bounces", "fetch", env=env)
    assert done.returncode == 1 and "is not a Maildir" in done.stderr and "Traceback" not in done.stderr
    env["DIGESTBOT_INBOX__URL"] = f"maildir://{maildir}"
    assert cli(tmp_path, "subscribers", "list", env=env).returncode == 0  # creates the store
    from bot.store.engine import make_engine, sessions

    engine = make_engine(f"sqlite:///{tmp_path / 'var' / 'digestbot.sqlite3'}")
    add_people(sessions(engine))
    engine.dispose()
    for name in ("gmail_hard.eml", "arf_abuse.eml", "out_of_office.eml"):
        deliver(maildir, name)
    done = cli(tmp_path, "bounces", "fetch", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "read 3 messages: 1 complaint, 1 hard bounce; 1 left for a person; 0 read before",
        "ada@example.com: now bounced",
        "ada@example.com: now unsubscribed",
    ]
    shown = cli(tmp_path, "subscribers", "show", ADA, env=env).stdout
    assert "hard bounce 5.1.1 (digest #42): 550-5.1.1 The email account" in shown
    assert "complaint (digest #42): abuse report from SomeGenerator/1.0" in shown
    data = json.loads(cli(tmp_path, "subscribers", "show", ADA, "--json", env=env).stdout)
    assert [e["kind"] for e in data["returned_mail"]] == ["complaint", "hard"]
    assert "hard bounce 5.1.1" in cli(tmp_path, "history", ADA, env=env).stdout
    stats = json.loads(cli(tmp_path, "stats", "--json", env=env).stdout.splitlines()[0])
    assert (stats["hard"], stats["soft"], stats["complaints"]) == (1, 0, 1)
    listed = cli(tmp_path, "subscribers", "list", "--status", "unsubscribed", env=env).stdout
    assert ADA in listed


def test_the_daemon_reads_the_inbox_on_its_own_job(
    engine: Engine, factory: sessionmaker[Session], maildir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from bot.choose.tagging import load_rules
    from bot.run.scheduler import Daemon
    from tests.conftest import ROOT

    add_people(factory)
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "signing.key").write_text(KEY.decode())
    settings = inbox_settings(maildir, interval_minutes=5).model_copy(
        update={"paths": Settings().paths.model_copy(update={"var_dir": tmp_path / "var"})}
    )
    deliver(maildir, "gmail_hard.eml")

    async def work() -> list[str]:
        daemon = Daemon(
            factory, Parts(settings, rules=load_rules(ROOT / "config" / "tags.toml")), engine=engine, deliver_jobs=False
        )
        jobs = [job.id for job in daemon._scheduler(NOW).get_jobs()]
        with caplog.at_level(logging.INFO):
            await daemon.elect()  # becoming the scheduler reads the inbox at once, not an interval later
        assert daemon.leadership.is_leader
        assert daemon.parts.metrics.returned.labels("hard")._value.get() == 1
        assert "inbox: read 1 message, recorded 1, left 0 for a person; 1 subscriber changed status" in caplog.text
        shutil.rmtree(maildir)  # the mailbox goes away: a warning, and the daemon goes on
        await daemon.inbox.read()
        daemon.leadership.release()
        return jobs

    jobs = asyncio.run(work())
    assert "inbox" in jobs
    assert statuses(factory)[ADA] is SubscriberStatus.BOUNCED
    assert "returned mail not read: inbox.url:" in caplog.text and "is not a Maildir" in caplog.text


def test_two_fetchers_at_once_record_each_message_once(factory: sessionmaker[Session], maildir: Path) -> None:
    import threading

    add_people(factory)
    full = (Path(__file__).parent / "fixtures" / "returns" / "delayed.eml").read_bytes()
    for n in range(40):
        deliver(maildir, full + f"\nX-Copy: {n}\n".encode())
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            read(factory, maildir)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert events(factory) == 40 and len(seen(maildir)) == 40 and not list((maildir / "new").iterdir())


def test_links_in_the_maildir_are_not_followed(factory: sessionmaker[Session], maildir: Path, tmp_path: Path) -> None:
    add_people(factory)
    outside = tmp_path / "outside.eml"
    outside.write_bytes((Path(__file__).parent / "fixtures" / "returns" / "postfix_hard.eml").read_bytes())
    (maildir / "new" / "1764000000.M0P1.link").symlink_to(outside)
    assert read(factory, maildir).read == 0 and events(factory) == 0


# --- issue 34 ----------------------------------------------------------------------------


def test_a_message_for_a_person_is_classified_once(
    factory: sessionmaker[Session], maildir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A megabyte of newlines from MAILER-DAEMON, left for a person: read in well under
    a second, and never classified again at the next readings, which come every ten
    minutes."""
    import time

    from bot.returns import inbox_reading as service

    add_people(factory)
    slow = deliver(maildir, b"From: MAILER-DAEMON@relay.example.org\r\nSubject: x\r\n\r\n" + b"\n" * 1_000_000)
    started = time.perf_counter()
    first = read(factory, maildir)
    assert time.perf_counter() - started < 5 and first.left == 1 and slow.exists()

    def classified_again(*_: object) -> None:
        raise AssertionError("classified twice")

    monkeypatch.setattr(service, "classify", classified_again)
    for _ in range(2):
        assert read(factory, maildir).left == 1 and slow.exists()
    assert events(factory) == 0


def test_one_file_that_cannot_be_read_is_skipped() -> None:
    """A message file the process may not read, sorted before the others, is one warning;
    the rest are read; the reading does not stop at it."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:  # not under pytest's folder, which only root may enter
        Path(scratch).chmod(0o755)
        _one_file_that_cannot_be_read_is_skipped(new_maildir(Path(scratch) / "Maildir"))


def _one_file_that_cannot_be_read_is_skipped(maildir: Path) -> None:
    blocked = deliver(maildir, "postfix_hard.eml")
    later = deliver(maildir, "exim_hard.eml")
    blocked.chmod(0)
    for folder in (maildir, maildir / "new", maildir / "cur"):
        folder.chmod(0o777)
    later.chmod(0o644)
    script = (
        "import os, sys, logging, pathlib\n"
        "from bot.returns.mailboxes import MaildirBox\n"
        "logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
        "if os.geteuid() == 0:\n"
        "    os.setgid(65534); os.setuid(65534)\n"  # root reads every file: be nobody, imports done
        "box = MaildirBox(pathlib.Path(sys.argv[1]), '', 10_000_000)\n"
        "print([ref.rpartition('.')[0] for ref, data in box.messages() if data])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(maildir)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"['new/{later.name.rpartition('.')[0]}']"
    assert "left unread: Permission denied" in done.stderr and done.stderr.count("\n") == 1


def test_marking_a_message_done_never_replaces_another(factory: sessionmaker[Session], maildir: Path) -> None:
    """``new/012.collide`` marked Seen where ``cur/012.collide:2,S`` (a person's mail)
    exists: both are kept; the rename never replaces the person's mail."""
    add_people(factory)
    (maildir / "new" / "012.collide").write_bytes(
        (Path(__file__).parent / "fixtures/returns/postfix_hard.eml").read_bytes()
    )
    persons = maildir / "cur" / "012.collide:2,S"
    persons.write_bytes(b"From: a person\r\n\r\nkeep me")
    assert read(factory, maildir).kinds == {ReturnKind.HARD: 1}
    assert persons.read_bytes().endswith(b"keep me")
    assert sorted(p.name for p in (maildir / "cur").iterdir()) == ["012.collide.1:2,S", "012.collide:2,S"]


def test_a_bounce_naming_an_internationalized_domain_in_ascii_finds_its_subscriber(
    factory: sessionmaker[Session], maildir: Path
) -> None:
    """Mail goes out to ``linus@xn--bcher-kva.example`` (IDNA), the store holds
    ``linus@bücher.example``: a DSN without VERP naming the first marks the second."""
    from bot.subscribers.fields import clean_fields
    from bot.subscribers.subscriptions import save

    save(factory, Settings(), [clean_fields("linus@bücher.example")], NOW)
    dsn = (
        (Path(__file__).parent / "fixtures" / "returns" / "postfix_hard.eml")
        .read_bytes()
        .replace(b"ada@example.com", b"linus@xn--bcher-kva.example")
        .replace(b"bounces+d42.artqb5lrcjmvzx4n@lab.example.org", b"bounces@lab.example.org")
    )
    deliver(maildir, dsn)
    report = read(factory, maildir)
    assert report.changed == [("linus@bücher.example", SubscriberStatus.BOUNCED)]
