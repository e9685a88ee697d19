"""What an operator types or imports, at its worst: deep filters, broken CSV rows,
bytes that are not UTF-8, data that looks like Rich markup, cells that look like
spreadsheet formulas.  Each gets a one-line error (or is printed literally), the
right exit code, and never a traceback; the good rows around a bad one still count.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import Cli, CliResult, wait_until_serving

DEEP = "not " * 499 + "gpu"


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path, columns=250)


def one_error_line(proc: CliResult) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_a_deeply_nested_filter_is_one_clear_error(cli: Cli) -> None:
    assert "nested more than" in one_error_line(cli("subscribers", "add", "a@example.org", "--filter", DEEP, code=2))
    assert "nested more than" in one_error_line(cli("tags", "test", DEEP, code=2))
    assert "nested more than" in one_error_line(cli("tags", "test", "(" * 900 + "gpu" + ")" * 900, code=2))
    cli("subscribers", "add", "b@example.org", "--filter", "not (not gpu)")


def test_a_csv_import_reports_each_bad_row_and_imports_the_rest(cli: Cli, tmp_path: Path) -> None:
    rows = [
        "email,name,filter",
        "one@example.org,One,gpu",
        f'deep@example.org,Deep,"{DEEP}"',
        "two@example.org,Two,llm",
        "huge@example.org," + "x" * 140_000 + ",gpu",
        "three@example.org,Three,*",
        "four@example.org,Four,*",
        "nul@example.org,N\x00ul,*",
        "five@example.org",
        'quote@example.org,"Unbalanced,gpu',  # that line's error: the row after it is read on its own
        "six@example.org,Six,*",
    ]
    csv_file = tmp_path / "people.csv"
    csv_file.write_text("\n".join(rows) + "\n", encoding="utf-8")
    proc = cli("subscribers", "import", str(csv_file), "--json", code=1)
    assert '"created": 6' in proc.stdout and '"bad_rows": 4' in proc.stdout
    for line in (3, 5, 8, 10):
        assert f'"line": {line}' in proc.stdout
    assert "quote opened on this line is never closed" in proc.stdout and "nested more than" in proc.stdout
    listed = cli("subscribers", "list", "--json").stdout
    assert all(f"{n}@example.org" in listed for n in ("one", "two", "three", "four", "five", "six"))


def test_a_row_or_command_with_several_bad_fields_names_every_one(cli: Cli, tmp_path: Path) -> None:
    csv_file = tmp_path / "people.csv"
    csv_file.write_text("email,timezone,filter\nnot-an-address,Mars/Olympus,gpu and (\n", encoding="utf-8")
    (bad,) = [
        row
        for row in cli("subscribers", "import", str(csv_file), "--json", code=1).stdout.splitlines()
        if '"line"' in row
    ]
    said = json.loads(bad)["error"]
    assert said.startswith("email: 'not-an-address': ") and "; timezone: 'Mars/Olympus' is not an IANA" in said
    assert "; filter: 'gpu and (': position 10: " in said and "filter: filter" not in said
    typed = one_error_line(cli("subscribers", "add", "bad", "--tz", "Mars/X", "--filter", "gpu and (", code=2))
    assert typed.startswith("error: EMAIL: 'bad': ") and "; --filter: 'gpu and (': position 10: " in typed
    assert "; --tz: 'Mars/X' is not an IANA time zone" in typed


@pytest.mark.parametrize(
    "args",
    [
        [b"subscribers", b"add", b"n@example.org", b"--name", b"x\xff"],
        [b"subscribers", b"add", b"n@example.org", b"--filter", b"gpu\xff"],
        [b"tags", b"test", b"gpu\xff"],
        [b"subscribers", b"show", b"\xffn@example.org"],
    ],
)
def test_arguments_that_are_not_utf8_are_refused(cli: Cli, args: list[bytes]) -> None:
    assert "not valid UTF-8" in one_error_line(cli(*args, code=2))


def test_data_is_printed_literally_never_as_rich_markup(cli: Cli, tmp_path: Path) -> None:
    title = ":warning: and :x: [bold]B[/bold] root:x:0 [link=https://evil.example]click[/link]"
    dump = tmp_path / "dumps" / "d.txt"
    dump.parent.mkdir()
    dump.write_text(
        f"Filtered by: [red]tag[/red] × Clear all\n\n{title}\n\nAda 2026-06-14\n\ns\n\nPDF\n", encoding="utf-8"
    )
    cli("dumps", "ingest", str(dump))
    listed = cli("entries", "list").stdout
    assert ":warning: and :x: [bold]B[/bold] root:x:0" in " ".join(listed.split()) or ":warning:" in listed
    assert "⚠" not in listed and "❌" not in listed
    shown = cli("entries", "show", "1").stdout
    assert "[bold]B[/bold]" in shown and "[red]tag[/red]" in shown
    cli("subscribers", "add", "m@example.org", "--name", "[bold]Mallory[/bold] :x:")
    assert "[bold]Mallory[/bold] :x:" in cli("subscribers", "list").stdout


@pytest.mark.slow
def test_export_round_trips_exactly_and_can_be_made_spreadsheet_safe(cli: Cli, tmp_path: Path) -> None:
    formula = '=HYPERLINK("https://evil.example","click")'
    cli("subscribers", "add", "f@example.org", "--name", formula)
    cli("subscribers", "add", "g@example.org", "--name", "+1 Grace")
    exact = cli("subscribers", "export").stdout
    assert '"=HYPERLINK(""https://evil.example"",""click"")"' in exact
    (tmp_path / "again.csv").write_text(exact, encoding="utf-8")
    cli("subscribers", "import", str(tmp_path / "again.csv"))
    assert cli("subscribers", "export").stdout == exact
    safe = cli("subscribers", "export", "--spreadsheet").stdout
    assert "'=HYPERLINK(" in safe and ",'+1 Grace," in safe
    assert all(not cell.startswith(("=", "+", "-", "@")) for line in safe.splitlines() for cell in line.split(","))


def test_a_missing_dump_folder_or_tag_rules_file_stops_the_start(cli: Cli, tmp_path: Path) -> None:
    """A typo in paths.dump_dir is not "nothing new": the commands that scan it refuse
    to start, naming it; so does a tags_file that is not there."""
    for command in (["dumps", "ingest"], ["run", "--once"], ["scheduler"]):
        line = one_error_line(cli(*command, code=2))
        assert line == f"error: paths.dump_dir: {tmp_path / 'dumps'} is not a folder (it does not exist or is a file)"
    (tmp_path / "dumps").mkdir()
    assert cli("dumps", "ingest").stdout == "nothing new to ingest\n"
    # A file just copied in is left for the next scan, and the scan says so; named, it is read now.
    shutil.copy(sorted((ROOT / "seeds").glob("*.txt"))[1], tmp_path / "dumps" / "today.txt")
    scan = cli("dumps", "ingest")
    assert scan.stdout == "" and scan.stderr.startswith("left 1 file for the next scan (dumps/today.txt): ")
    assert "watch.quiet_seconds" in scan.stderr and "name a file to read it now" in scan.stderr
    assert "new" in cli("dumps", "ingest", "dumps/today.txt").stdout
    cli.env["DIGESTBOT_PATHS__TAGS_FILE"] = str(tmp_path / "tagz.toml")
    for command in (["dumps", "ingest"], ["run", "--once"], ["tags", "list"]):
        assert one_error_line(cli(*command, code=2)).endswith("tagz.toml: tag rules file not found (paths.tags_file)")


def _every_command() -> list[list[str]]:
    import typer.main

    from bot.cli import app

    found: list[list[str]] = []

    def walk(command: object, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


@pytest.mark.parametrize("command", _every_command(), ids=lambda c: " ".join(c) or "digestbot")
def test_help_screens_show_values_the_unix_way(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """EMAIL, [EMAIL], PATHS..., --hour N, a bare --flag: never Python type names."""
    import typer.main

    from bot.cli import app
    from bot.cli.command_line import plain_help, run_command_line

    root = typer.main.get_command(app)
    plain_help(root)
    saved, sys.argv = sys.argv, ["digestbot", *command, "--help"]
    try:
        assert run_command_line(root) == 0
    finally:
        sys.argv = saved
    shown = capsys.readouterr().out
    assert shown.startswith("Usage: digestbot")
    for python_words in ("<int", "<str", "<bool", "<path", "<list", "<float", "{", "list[", " str ", " int ", " bool"):
        assert python_words not in shown, (python_words, shown)


def test_usage_errors_are_one_line_in_our_words(cli: Cli) -> None:
    assert one_error_line(cli("subscribers", "add", "a@example.org", "--hour", "x", code=2)) == (
        "error: --hour: must be a whole number (see 'digestbot subscribers add --help')"
    )
    assert one_error_line(cli("history", "--status", "lost", code=2)).startswith(
        "error: --status: 'lost' is not one of 'queued'"
    )
    assert one_error_line(cli("subscribers", "add", code=2)) == (
        "error: Missing argument 'EMAIL' (see 'digestbot subscribers add --help')"
    )
    # A value the option's type accepts but the field does not: named as the option too.
    assert one_error_line(cli("subscribers", "add", "a@example.org", "--hour", "25", code=2)) == (
        "error: --hour: 25 is not a whole hour 0-23"
    )
    assert one_error_line(cli("subscribers", "add", "a@example.org", "--tz", "Mars/Olympus", code=2)).startswith(
        "error: --tz: 'Mars/Olympus' is not an IANA time zone"
    )


def test_a_filter_naming_a_tag_nothing_carries_is_saved_with_a_warning(cli: Cli, tmp_path: Path) -> None:
    added = cli("subscribers", "add", "a@example.org", "--filter", "gpuu and snn")
    assert added.stderr == (
        "warning: filter 'gpuu and snn': no entry has the tag 'gpuu' (did you mean gpu?) "
        "and no tag rule makes it, so it matches nothing for now\n"
    )
    assert cli("subscribers", "edit", "a@example.org", "--filter", "gpu and snn").stderr == ""
    people = tmp_path / "people.csv"
    people.write_text("email,filter\nb@example.org,fpgaa\nc@example.org,fpga\n")
    imported = cli("subscribers", "import", str(people))
    assert "2 added" in imported.stdout
    assert imported.stderr.startswith("warning: line 2: no entry has the tag 'fpgaa' (did you mean fpga?)")
    assert imported.stderr.count("\n") == 1
    tested = cli("tags", "test", 'gpuu or "no such words"')
    assert tested.stderr == 'matched no entry on its own: "no such words", gpuu (did you mean gpu?)\n'


HEAVY = ("sqlalchemy", "pydantic_settings", "alembic", "lark", "jinja2", "aiosmtplib", "apscheduler", "feedparser")


@pytest.mark.parametrize(
    "arguments", [["--help"], ["--version"], ["subscribers", "--help"], ["tags", "test", "--help"]]
)
def test_help_and_version_load_no_heavy_library(arguments: list[str]) -> None:
    """What makes --help fast (bench/startup.py): the store, config and mail libraries
    are imported by the commands that use them, not by every command."""
    probe = (
        "import sys\n"
        f"sys.argv = ['digestbot', *{arguments!r}]\n"
        "from bot.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_a_store_command_loads_the_store_and_settings_libraries_only(tmp_path: Path) -> None:
    """What keeps a store command's start near its floor (bench/startup.py): the filter
    parser, the templates, mail and scheduling load where a command needs them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env["DIGESTBOT_DATABASE__URL"] = f"sqlite:///{tmp_path}/store.sqlite3"
    made = [sys.executable, "-m", "bot", "subscribers", "add", "a@example.org", "--filter", "gpu"]
    assert subprocess.run(made, cwd=tmp_path, env=env, capture_output=True, timeout=60).returncode == 0
    probe = (
        "import sys\n"
        "sys.argv = ['digestbot', 'subscribers', 'list']\n"
        "from bot.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "a@example.org" in done.stdout and done.stdout.splitlines()[-1] == "['pydantic_settings', 'sqlalchemy']"


def test_preview_writes_the_message_or_says_why_not(cli: Cli, tmp_path: Path) -> None:
    cli("dumps", "ingest", *map(str, sorted((ROOT / "seeds").glob("*.txt"))))
    cli("subscribers", "add", "a@example.org", "--filter", "snn", "--hour", "0")
    cli("subscribers", "add", "b@example.org", "--filter", "nothing-here", "--hour", "0")
    written = cli("preview", "a@example.org", "--eml", "next.eml", "--html", "next.html").stdout
    assert "3 entries" in written and (tmp_path / "next.eml").read_bytes().startswith(b"Subject: 3 new entries")
    assert "SupraSNN" in (tmp_path / "next.html").read_text()
    for name in ("next.eml", "next.html"):  # each file with its own size
        assert f"{name} ({(tmp_path / name).stat().st_size:,} bytes)" in written, written
    assert one_error_line(cli("preview", "b@example.org", "--eml", "b.eml", code=1)).startswith(
        "error: b@example.org would get no digest on "
    )
    assert not (tmp_path / "b.eml").exists()
    day = cli("preview", "--all", "--json").stdout
    assert '"email": "a@example.org"' in day and '"entries": 3' in day and '"entries": 0' in day
    one_error_line(cli("preview", "--all", "a@example.org", code=2))
    one_error_line(cli("preview", code=2))
    assert "Digests (0)" in cli("history").stdout  # a preview records nothing


def test_preview_of_a_paused_subscriber_says_why(cli: Cli) -> None:
    cli("subscribers", "add", "p@example.org")
    cli("subscribers", "pause", "p@example.org")
    line = one_error_line(cli("preview", "p@example.org", "--eml", "p.eml", code=1))
    assert line == "error: p@example.org is paused: they get no digest"


# --- issue 34: numbers, dates, URLs, paths, and a store in trouble ----------------------

HUGE = "9" * 24


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("entries", "show", HUGE), f"error: no entry '{HUGE}'"),
        (("entries", "list", "--limit", HUGE), "error: --limit: must be less than or equal to 1000000000"),
        (("history", "--limit", HUGE), "error: --limit: must be less than or equal to 1000000000"),
        (("resend", HUGE), f"error: DIGEST_ID: {HUGE} is larger than any digest's id"),
        (("preview", "a@example.org", "--date", "0001-01-01"), "error: --date: '0001-01-01' is not between"),
        (("preview", "a@example.org", "--date", "9999-12-31"), "error: --date: '9999-12-31' is not between"),
        (("resend", "--subscriber", "a@example.org", "--date", "0001-01-01"), "error: --date: '0001-01-01'"),
        (("dumps", "ingest", ""), "error: PATH: an empty path"),
    ],
)
def test_numbers_dates_and_paths_out_of_range_are_one_line(cli: Cli, args: tuple[str, ...], said: str) -> None:
    """A number too big for its type is a one-line error, not an OverflowError's traceback,
    and `dumps ingest ''` names no file rather than scanning the current folder."""
    cli("subscribers", "add", "a@example.org")
    (cli.folder / "stray.txt").write_text("a file in the current folder, not a dump")
    done = cli(*args, code=1 if args[0] == "entries" and args[1] == "show" else 2)
    assert one_error_line(done).startswith(said), done.stderr


def test_a_malformed_feed_url_is_one_failed_source(cli: Cli) -> None:
    done = cli("feeds", "fetch", "http://[::1", code=1)
    assert "http://[::1: not a URL that can be fetched" in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.write_bytes(os.urandom(100_000)), "it is not a SQLite database"),
        (lambda p: p.write_text("hello\n"), "it is not a SQLite database"),
        (lambda p: p.mkdir(), "it cannot be opened"),
    ],
    ids=["random bytes", "a text file", "a folder"],
)
def test_a_store_that_is_no_store_is_one_line(cli: Cli, make: object, said: str) -> None:
    store = cli.folder / "cli.sqlite3"
    make(store)  # type: ignore[operator]
    for command in (("subscribers", "list"), ("stats",), ("db", "current"), ("subscribers", "add", "b@example.org")):
        line = one_error_line(cli(*command, code=2))
        assert line.startswith(f"error: the store {store}: {said}"), line


def _set_revision(store: Path, revision: str) -> None:
    import sqlite3

    with sqlite3.connect(store) as connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (revision,))


def test_a_store_of_another_version_is_one_line(cli: Cli) -> None:
    cli("subscribers", "add", "a@example.org")
    store = cli.folder / "cli.sqlite3"
    for command in (("subscribers", "list"), ("db", "upgrade")):
        _set_revision(store, "9999")
        line = one_error_line(cli(*command, code=2))
        assert "its schema is 9999, newer than this digestbot's" in line
        _set_revision(store, "0000")
        line = one_error_line(cli(*command, code=2))
        assert "its schema is '0000', which this digestbot does not know" in line


def test_a_garbage_unsubscribe_journal_is_one_line(cli: Cli) -> None:
    cli("subscribers", "add", "a@example.org")
    (cli.folder / "cli-unsubscribes.sqlite3").write_text("garbage\n" * 100)
    line = one_error_line(cli("send-now", "a@example.org", code=2))
    assert line.startswith(f"error: the unsubscribe journal {cli.folder / 'cli-unsubscribes.sqlite3'}: it is not")


def _mounted(folder: Path, size: str) -> bool:
    folder.mkdir()
    return (
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=False).returncode
        == 0
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs (a full disk, a read-only one) takes root")
def test_a_full_disk_and_a_read_only_store_are_one_line_and_nothing_half_written(cli: Cli) -> None:
    disk = cli.folder / "disk"
    if not _mounted(disk, "1600k"):
        pytest.skip("this machine does not let root mount a tmpfs")
    try:
        cli.env["DIGESTBOT_DATABASE__URL"] = f"sqlite:///{disk / 'store.sqlite3'}"
        cli("subscribers", "add", "a@example.org")
        rows = "email\n" + "".join(f"reader{n}@example.org\n" for n in range(20_000))
        (cli.folder / "many.csv").write_text(rows)
        line = one_error_line(cli("subscribers", "import", str(cli.folder / "many.csv"), code=2))
        assert line.startswith(f"error: the store {disk / 'store.sqlite3'}: the disk holding it is full"), line
        assert cli("subscribers", "list", "--json").stdout.count("\n") == 1  # the import left nothing behind
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        for command in (("subscribers", "list"), ("stats",), ("db", "current")):  # reading may work; never a traceback
            done = cli(*command, code=None)
            assert done.returncode == 0 or "it is read-only here" in one_error_line(done), done.stderr
        line = one_error_line(cli("subscribers", "add", "b@example.org", code=2))
        assert line.startswith(f"error: the store {disk / 'store.sqlite3'}: it is read-only here"), line
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.slow
def test_the_words_say_what_is_there(cli: Cli, tmp_path: Path) -> None:
    """Issue 48, item 5: "planned 1 digests", a group described as one of its parts, a
    help showing 9223372036854775807, a comment pointing at the wrong page, an http
    public URL's missing one-click said nowhere, alembic's lines in serve's log."""
    import signal
    import subprocess

    from bot.tools.sink import free_port
    from tests.helpers import DIGESTBOT

    assert "backup, restore" in " ".join(cli("db", "--help").stdout.split())
    assert "9223372036854775807" not in cli("resend", "--help").stdout
    config = (ROOT / "config" / "digestbot.toml").read_text()
    inbox = config.split("\n[inbox]\n", 1)[1].split("\n[", 1)[0]
    assert "docs/deliverability.md" in inbox and "README" not in inbox
    port = free_port()
    env = cli.env | {"DIGESTBOT_WEB__PUBLIC_URL": f"http://127.0.0.1:{port}", "DIGESTBOT_WEB__LISTEN_PORT": str(port)}
    env |= {"DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var")}
    serve = subprocess.Popen([DIGESTBOT, "serve"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    wait_until_serving(serve, port)  # the warnings come before it answers; a fixed sleep was short under load
    serve.send_signal(signal.SIGTERM)
    logged = serve.communicate(timeout=30)[1]
    assert "no List-Unsubscribe-Post" in logged and "RFC 8058 needs https" in logged, logged
    assert "alembic" not in logged, logged


def _without(modules: tuple[str, ...], tmp_path: Path, *arguments: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command line with *modules* not importable, as on an install without their extra."""
    blocked = "".join(f"sys.modules[{name!r}] = None\n" for name in modules)
    probe = f"import sys\n{blocked}sys.argv = ['digestbot', *{list(arguments)!r}]\nfrom bot.cli import main\nmain()\n"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")} | env
    environment["DIGESTBOT_DATABASE__URL"] = environment.get("DIGESTBOT_DATABASE__URL", f"sqlite:///{tmp_path}/s.db")
    environment["DIGESTBOT_PATHS__VAR_DIR"] = str(tmp_path / "var")
    return subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60
    )


POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/nowhere"


@pytest.mark.parametrize(
    ("arguments", "env"),
    [
        (("db", "current"), {"DIGESTBOT_DATABASE__URL": POSTGRES}),
        (("subscribers", "list"), {"DIGESTBOT_DATABASE__URL": POSTGRES}),
        (("db", "copy", "--to", POSTGRES), {}),
    ],
)
def test_a_command_that_needs_the_postgres_extra_says_so_in_one_line(
    tmp_path: Path, arguments: tuple[str, ...], env: dict[str, str]
) -> None:
    done = _without(("psycopg",), tmp_path, *arguments, **env)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "error: a PostgreSQL store needs the postgres extra, which is not installed: "
        "pip install 'digestbot[postgres]'\n"
    )


def test_ranking_without_the_taste_extra_says_which_extra_and_sends_unranked(tmp_path: Path) -> None:
    taste = ("numpy", "scipy", "sklearn")
    library = tmp_path / "library.bib"
    library.write_text("@article{a, title={Spiking Transformers on FPGAs}}\n")
    assert _without(taste, tmp_path, "subscribers", "add", "reader@example.org").returncode == 0
    added = _without(taste, tmp_path, "subscribers", "library", "add", "reader@example.org", str(library))
    assert added.returncode == 0, added.stderr
    assert added.stderr.count("\n") == 1 and "pip install 'digestbot[taste]'" in added.stderr
    assert "Traceback" not in added.stderr
