"""The CLI through its real console-script entry point, as an operator runs it."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from datetime import date, timedelta
from pathlib import Path

import pytest

from bot.subscribers.settings import SETTINGS
from bot.tools.sink import Fault
from tests.conftest import ROOT, SEEDS
from tests.helpers import DIGESTBOT, Cli, daemon_env, daemon_until
from tests.seed_facts import MINIMAX


@pytest.fixture
def run(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["dumps"],
        ["dumps", "ingest"],
        ["dumps", "list"],
        ["entries", "list"],
        ["entries", "show"],
        ["feeds", "fetch"],
        ["db", "upgrade"],
        ["db", "current"],
        ["config", "show"],
        ["subscribers"],
        ["subscribers", "add"],
        ["subscribers", "import"],
        ["subscribers", "export"],
        ["subscribers", "list"],
        ["subscribers", "show"],
        ["subscribers", "edit"],
        ["subscribers", "pause"],
        ["subscribers", "resume"],
        ["subscribers", "remove"],
        ["tags"],
        ["tags", "list"],
        ["tags", "test"],
        ["tags", "apply"],
        ["preview"],
        ["run"],
        ["scheduler"],
        ["worker"],
        ["serve"],
        ["send-now"],
        ["resend"],
        ["history"],
        ["stats"],
        ["demo"],
    ],
)
@pytest.mark.slow
def test_every_command_has_help(run, command: list[str]) -> None:
    assert "Usage:" in run(*command, "--help").stdout


def test_ingest_list_show_round_trip(run) -> None:
    seeds = sorted(str(p) for p in SEEDS.glob("*.txt"))
    ingested = json_lines(run("dumps", "ingest", *seeds, "--json").stdout)
    assert [r["new"] for r in ingested] == [5, 2, 9, 0]

    again = run("dumps", "ingest", seeds[0]).stdout
    assert "duplicate of source #1, nothing new" in again

    sources = json_lines(run("dumps", "list", "--json").stdout)
    assert [(s["entries"], s["new"], s["status"]) for s in sources] == [
        (5, 5, "ingested"),
        (5, 2, "ingested"),
        (16, 9, "ingested"),
        (4, 0, "ingested"),
        (0, 0, "duplicate"),
    ]
    assert {"id", "file", "entries", "new", "status", "error", "sha256", "ingested_at"} <= set(sources[0])

    table = run("dumps", "list").stdout
    assert "000_a9775d3f59806dea.txt" in table and "duplicate (of #1)" in table

    # "AI" comes only from dump 003's header (no rule in config/tags.toml has it).
    gpu = json_lines(run("entries", "list", "--tag", "ai", "--json").stdout)
    assert len(gpu) == 4 and all("AI" in e["tags"] for e in gpu)
    assert len(json_lines(run("entries", "list", "--since", "2000-01-01", "--json").stdout)) == 16
    assert json_lines(run("entries", "list", "--since", "2999-01-01", "--json").stdout) == []

    (minimax,) = [e for e in gpu if e["title"] == MINIMAX]
    (shown,) = json_lines(run("entries", "show", minimax["key"], "--json").stdout)
    assert len(shown["appearances"]) == 3
    assert {"tag": "AI", "origin": "header"} in shown["tag_origins"]
    assert MINIMAX in run("entries", "show", minimax["key"]).stdout


@pytest.mark.slow
def test_exit_codes(run, tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Title only\n")
    proc = run("dumps", "ingest", str(bad), code=1)
    assert "failed:" in proc.stderr and "bad.txt:1: entry on line 1 is truncated" in proc.stderr
    assert "bad.txt" in run("dumps", "list", "--status", "failed").stdout
    run("entries", "show", "paper:nope", code=1)
    run("entries", "list", "--since", "yesterday", code=2)
    run("dumps", "list", "--no-such-option", code=2)
    run("no-such-command", code=2)
    proc = run("--config", str(tmp_path / "missing.toml"), "dumps", "list", code=2)
    assert "config file not found" in proc.stderr


def test_scan_without_paths_uses_the_dump_folder(run, tmp_path: Path) -> None:
    (tmp_path / "dumps").mkdir()
    target = tmp_path / "dumps" / "000.txt"
    shutil.copyfile(sorted(SEEDS.glob("*.txt"))[0], target)
    os.utime(target, (1, 1))
    assert "5 entries, 5 new" in run("dumps", "ingest").stdout
    assert "nothing new to ingest" in run("dumps", "ingest").stdout


def test_config_show_masks_the_password(run) -> None:
    shown = run("config", "show", env={"DIGESTBOT_SMTP__PASSWORD": "pa55word-xyz"}).stdout
    assert "pa55word-xyz" not in shown
    assert json.loads(shown)["smtp"]["password"] == "**********"


@pytest.mark.slow
def test_subscriber_workflow(run, tmp_path: Path) -> None:
    run("dumps", "ingest", *sorted(str(p) for p in SEEDS.glob("*.txt")))
    imported = run("subscribers", "import", str(ROOT / "config" / "subscribers.example.csv")).stdout
    assert "5 added, 0 updated, 0 unchanged, 0 bad rows" in imported
    again = run("subscribers", "import", str(ROOT / "config" / "subscribers.example.csv")).stdout
    assert "0 added, 0 updated, 5 unchanged, 0 bad rows" in again

    everyone = json_lines(run("subscribers", "list", "--json").stdout)
    assert [s["email"] for s in everyone] == [
        "ada@example.org",
        "carver@example.org",
        "edsger@example.org",
        "grace@example.org",
        "linus@bücher.example",
    ]
    assert [s["email"] for s in json_lines(run("subscribers", "list", "--status", "paused", "--json").stdout)] == [
        "linus@bücher.example"
    ]
    assert [s["email"] for s in json_lines(run("subscribers", "list", "--tag", "LLM", "--json").stdout)] == [
        "grace@example.org"
    ]

    preview = json_lines(run("preview", "grace@example.org", "--json").stdout)
    assert len(preview) == 6 and all(p["why"] for p in preview)
    tomorrow = (date.today() + timedelta(days=1)).isoformat()
    assert run("preview", "carver@example.org", "--date", tomorrow).stdout.count("paper:") == 3
    # As of a day before anything was ingested: nothing yet.
    quiet = run("preview", "carver@example.org", "--date", "2026-06-15").stdout
    assert "0 entries" in quiet and "Nothing for their next digest yet: nothing new has arrived since" in quiet

    run(
        "subscribers",
        "add",
        "zoe@example.org",
        "--name",
        "Zoë",
        "--filter",
        '"sparse attention" and not snn',
        "--tz",
        "Asia/Tokyo",
        "--hour",
        "7",
    )
    (zoe,) = json_lines(run("subscribers", "show", "ZOE@example.org", "--json").stdout)
    assert (zoe["name"], zoe["filter"], zoe["timezone"], zoe["send_hour"]) == (
        "Zoë",
        '"sparse attention" and not snn',
        "Asia/Tokyo",
        7,
    )
    run("subscribers", "add", "zoe@example.org", code=1)
    run("subscribers", "edit", "zoe@example.org", "--filter", "moe", "--hour", "9")
    assert json_lines(run("subscribers", "show", "zoe@example.org", "--json").stdout)[0]["filter"] == "moe"
    run("subscribers", "pause", "zoe@example.org")
    assert json_lines(run("subscribers", "show", "zoe@example.org", "--json").stdout)[0]["status"] == "paused"
    run("subscribers", "resume", "zoe@example.org")
    run("subscribers", "remove", "zoe@example.org")
    assert json_lines(run("subscribers", "show", "zoe@example.org", "--json").stdout)[0]["status"] == "unsubscribed"
    # Paused, a later resume would subscribe them again with no consent event: refused.
    refused = run("subscribers", "pause", "zoe@example.org", code=1)
    assert refused.stderr.count("\n") == 1 and "unsubscribed" in refused.stderr
    assert json_lines(run("subscribers", "show", "zoe@example.org", "--json").stdout)[0]["status"] == "unsubscribed"
    run("subscribers", "remove", "zoe@example.org", "--purge")
    run("subscribers", "show", "zoe@example.org", code=1)

    exported = run("subscribers", "export").stdout
    settings = "".join(f",{s.name}" for s in SETTINGS)  # the yes/no settings follow, each a column
    assert exported.splitlines()[0] == "email,name,filter,timezone,send_hour,status,backfill,cadence" + settings
    assert len(exported.splitlines()) == 6

    bad = run("subscribers", "add", "eve@example.org", "--filter", "gpu and (", code=2)
    assert "position 10" in bad.stderr and bad.stderr.count("\n") == 1
    run("subscribers", "add", "eve@example.org", "--name", "Eve\r\nBcc: x@example.org", code=2)
    run("subscribers", "add", "eve@example.org", "--tz", "Mars/Base", code=2)
    run("subscribers", "pause", "nobody@example.org", code=1)

    broken = tmp_path / "broken.csv"
    broken.write_text("email,send_hour\nok@example.org,8\nbad@@example.org,8\nlate@example.org,99\n")
    proc = run("subscribers", "import", str(broken), code=1)
    assert "1 added, 0 updated, 0 unchanged, 2 bad rows" in proc.stdout
    assert "3 " in proc.stderr and "4 " in proc.stderr and "send_hour: 99" in proc.stderr


@pytest.mark.slow
def test_tags_commands(run, tmp_path: Path) -> None:
    run("dumps", "ingest", *sorted(str(p) for p in SEEDS.glob("*.txt")))
    tags = {t["tag"].casefold(): t for t in json_lines(run("tags", "list", "--json").stdout)}
    assert tags["gpu"]["by_origin"]["header"] == 4 and tags["gpu"]["rule"] is True
    found = json_lines(run("tags", "test", "snn or fpga", "--json").stdout)
    assert [f["title"].split(":")[0] for f in found][:2] == ["ReSCom", "SupraSNN"]
    assert "position 7" in run("tags", "test", "snn or", code=2).stderr

    rules = tmp_path / "tags.toml"
    rules.write_text('[snn]\nkeywords = ["spiking"]\n')
    applied = run("tags", "apply", env={"DIGESTBOT_PATHS__TAGS_FILE": str(rules)})
    assert "re-tagged 16 entries with 1 rule from" in applied.stdout
    assert json_lines(run("tags", "list", "--json", env={"DIGESTBOT_PATHS__TAGS_FILE": str(rules)}).stdout)
    rules.write_text("[snn]\n")
    assert (
        "needs at least one keyword"
        in run("tags", "apply", env={"DIGESTBOT_PATHS__TAGS_FILE": str(rules)}, code=2).stderr
    )


@pytest.mark.slow
def test_run_once_history_stats_resend_send_now(run, sink, tmp_path: Path) -> None:
    (tmp_path / "dumps").mkdir()  # the folder run --once scans
    smtp = {
        "DIGESTBOT_SMTP__PORT": str(sink.port),
        "DIGESTBOT_PATHS__TEMPLATES_DIR": str(ROOT / "templates"),
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
    }
    run("dumps", "ingest", *sorted(str(p) for p in SEEDS.glob("*.txt")), env=smtp)
    run("subscribers", "import", str(ROOT / "config" / "subscribers.example.csv"), env=smtp)
    first = run("run", "--once", "--all-due", env=smtp).stdout
    assert "planned 4 digests" in first and "sent 4," in first
    assert len(sink.received) == 4
    assert "planned 0 digests" in run("run", "--once", "--all-due", env=smtp).stdout
    run("run", "--all-due", code=2, env=smtp)

    history = json_lines(run("history", "--json", env=smtp).stdout)
    sent = [h for h in history if h["state"] == "sent"]
    assert len(sent) == 4 and all(h["attempts"] == 1 and h["smtp_code"] == 250 for h in sent)
    assert len(json_lines(run("history", "grace@example.org", "--status", "sent", "--json", env=smtp).stdout)) == 1
    days = json_lines(run("stats", "--json", env=smtp).stdout)  # local days differ by zone
    assert [sum(d[k] for d in days) for k in ("planned", "sent", "failed", "bounced")] == [4, 4, 0, 0]
    assert "last_digests" in json_lines(run("subscribers", "show", "grace@example.org", "--json", env=smtp).stdout)[0]

    grace = next(h for h in sent if h["subscriber"] == "grace@example.org")
    assert "queued 1 resend:" in run("resend", str(grace["id"]), env=smtp).stdout
    assert (
        "queued 1 resend:"
        in run("resend", "--subscriber", "grace@example.org", "--date", grace["local_date"], env=smtp).stdout
    )
    assert "queued 0 resends" in run("resend", "--failed", env=smtp).stdout
    run("resend", "99999", code=1, env=smtp)
    run("resend", code=2, env=smtp)
    assert len(sink.received) == 6 and sink.received[-1].message["Subject"].startswith("[resent] ")

    nothing = run("send-now", "ada@example.org", env=smtp).stdout
    assert "queued 0 digests; 1 subscriber had nothing new" in nothing
    run("send-now", "nobody@example.org", code=1, env=smtp)
    # A day whose digest was a manual one: resend points to that digest by its id.
    run("subscribers", "add", "eve@example.org", "--filter", "snn", env=smtp)
    assert "queued 1 digest" in run("send-now", "eve@example.org", env=smtp).stdout
    manual = json_lines(run("history", "eve@example.org", "--json", env=smtp).stdout)[0]
    wrong = run("resend", "--subscriber", "eve@example.org", "--date", manual["local_date"], code=1, env=smtp)
    assert f"#{manual['id']} (manual, sent)" in wrong.stderr, wrong.stderr
    assert f"digestbot resend {manual['id']}" in wrong.stderr

    # Something asked for and not done is exit 1, with the reason.
    run("subscribers", "remove", "ada@example.org", env=smtp)
    left = run("send-now", "ada@example.org", code=1, env=smtp)
    assert left.stderr == "error: ada@example.org is unsubscribed: nothing sent\n"
    sink.handler.faults = lambda recipient, attempt: Fault("rcpt", "550 5.1.1 no such mailbox")
    refused = run("resend", str(grace["id"]), code=1, env=smtp).stdout
    assert "bounced 1," in refused


def test_demo_writes_an_inbox(run, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    shutil.copytree(ROOT / "seeds", tmp_path / "seeds")
    shutil.copytree(ROOT / "templates", tmp_path / "templates")
    env = {"DIGESTBOT_PATHS__DUMP_DIR": str(tmp_path / "seeds"), "DIGESTBOT_PATHS__TAGS_FILE": "config/tags.toml"}
    shown = run("demo", env=env).stdout
    assert "9 messages in var/inbox/" in shown
    assert "sign-up page: http://127.0.0.1:8080/subscribe" in " ".join(shown.split())
    assert len(list((tmp_path / "var" / "inbox").glob("*.eml"))) == 9
    assert "0009.html" in (tmp_path / "var" / "inbox" / "index.html").read_text()
    # Ada (`*`) has the example library: her day-3 digest leads with the two SNN papers.
    picks = [p for p in (tmp_path / "var" / "inbox").glob("*.html") if "Top picks for you" in p.read_text()]
    # A Top pick only where the model is sure: day 3's two spiking-network papers, each
    # named close to a paper of Ada's library; day 1's MiniMax (near none of them) is none.
    assert len(picks) == 1 and "ada@example.org" in picks[0].read_text()
    page = html.unescape(picks[0].read_text())
    top = page.split("Also in this digest")[0]
    assert "ReSCom" in top and "SupraSNN" in top and "MiniMax" not in top
    for title in ("ReSCom", "SupraSNN"):
        entry = next(block for block in page.split('<div class="entry"')[1:] if f">{title}:" in block)
        assert re.search(r"<p class=\"why\"[^>]*>Close to '[^']+' in your library</p>", entry), entry
    assert "9 messages" in run("demo", env=env).stdout  # repeatable: starts afresh each time


def test_daemon_sends_then_stops_cleanly_on_sigterm(tmp_path: Path, sink) -> None:
    import signal
    import time

    env = daemon_env(tmp_path, "d.sqlite3", SEEDS, sink.port)
    subprocess.run(
        [DIGESTBOT, "subscribers", "add", "ada@example.org", "--tz", "UTC", "--hour", "0"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    daemon = subprocess.Popen(
        [DIGESTBOT, "-v", "run"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not sink.received and time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(0.2)
        assert len(sink.received) == 1, daemon.stderr.read() if daemon.poll() is not None else "no mail"
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert "stopped" in daemon.stderr.read()
    assert len(sink.received) == 1


def test_sqlite_refuses_a_second_worker(tmp_path: Path) -> None:
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env["DIGESTBOT_DATABASE__URL"] = f"sqlite:///{tmp_path / 'w.sqlite3'}"
    env["DIGESTBOT_PATHS__VAR_DIR"] = str(tmp_path / "var")
    env["DIGESTBOT_PATHS__TEMPLATES_DIR"] = str(ROOT / "templates")
    first = subprocess.Popen([DIGESTBOT, "worker"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "w.sqlite3.worker.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        second = subprocess.run(
            [DIGESTBOT, "worker"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 1
        assert "SQLite supports one worker" in second.stderr
    finally:
        first.terminate()
        assert first.wait(timeout=30) == 0


@pytest.mark.slow
@pytest.mark.parametrize("source", ["file", "environment"])
@pytest.mark.parametrize("entry", ["send-now", "run --once", "run"])
def test_build_processes_work_with_settings_as_the_program_loads_them(
    tmp_path: Path, sink, source: str, entry: str
) -> None:
    """digest.build_processes sends the settings into each build process: loaded from a
    file or from the environment, through the commands that deliver, they get there."""

    env = daemon_env(tmp_path, "b.sqlite3", SEEDS, sink.port)
    if source == "file":
        (tmp_path / "digestbot.toml").write_text("[digest]\nbuild_processes = 1\n")
        env["DIGESTBOT_CONFIG"] = str(tmp_path / "digestbot.toml")
    else:
        env["DIGESTBOT_DIGEST__BUILD_PROCESSES"] = "1"
    cli = Cli(tmp_path, env, placed=False)
    cli("subscribers", "add", "ada@example.org", "--tz", "UTC", "--hour", "0")
    if entry != "run":
        cli("dumps", "ingest")
        command = [*entry.split(), *(["ada@example.org"] if entry == "send-now" else ["--all-due"])]
        said = cli(*command, own_process=True).stdout  # the build process starts from the console script
        assert "sent 1," in said, said
    else:
        logged = daemon_until(tmp_path, cli.env, lambda: bool(sink.received))
        assert "Traceback" not in logged and "delivery stopped" not in logged, logged
    assert [r.recipients for r in sink.received] == [["ada@example.org"]]


@pytest.mark.slow
def test_resend_tells_what_became_of_it_and_refuses_a_reader_who_left(tmp_path: Path, sink) -> None:
    """Issue 48, item 2: a resend to an unsubscribed reader said "queued 1 resend" and
    exit 0; with a worker running, "sent 0" while the worker sent it."""
    import signal
    import time

    (tmp_path / "dumps").mkdir()
    env = {
        "DIGESTBOT_SMTP__PORT": str(sink.port),
        "DIGESTBOT_PATHS__TEMPLATES_DIR": str(ROOT / "templates"),
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
    }
    run = Cli(tmp_path, env)
    run("dumps", "ingest", *sorted(str(p) for p in SEEDS.glob("*.txt")))
    run("subscribers", "import", str(ROOT / "config" / "subscribers.example.csv"))
    run("run", "--once", "--all-due")
    sent = {h["subscriber"]: h["id"] for h in json_lines(run("history", "--json").stdout) if h["state"] == "sent"}
    run("subscribers", "remove", "ada@example.org")
    refused = run("resend", str(sent["ada@example.org"]), code=1)
    assert refused.stderr == "error: ada@example.org is unsubscribed: nothing sent\n"
    assert "queued" not in refused.stdout and len(sink.received) == 4
    worker = subprocess.Popen([DIGESTBOT, "worker"], cwd=tmp_path, env=run.env, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)  # the worker is up; whichever of the two claims the resend, its outcome is told
        said = run("resend", str(sent["grace@example.org"]), own_process=True).stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert re.search(r"^#\d+ to grace@example\.org: sent$", said, re.MULTILINE), said
    assert len(sink.received) == 5 and sink.received[-1].message["Subject"].startswith("[resent] ")
