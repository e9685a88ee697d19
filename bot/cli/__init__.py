"""Admin CLI: a thin shell over the service functions (ingest, watcher, store), one
module per command group, the shared shell in ``shell``.

Exit codes: 0 ok, 1 some input failed (or a looked-up item is missing),
2 usage or configuration error.  Every list/show command takes ``--json`` and
then prints one JSON object per line with snake_case keys.  Never holds
business logic of its own: anything a command does, the scheduler can call.
"""

from __future__ import annotations

import sys

from bot.cli import (  # noqa: F401 - they register on their groups
    db_commands,
    db_restore_commands,
    subscriber_csv_commands,
    subscriber_show_commands,
    tag_commands,
)
from bot.cli.admin import config_app, db_app, init_command, sink_command, smtp_app
from bot.cli.channel_commands import channels_app
from bot.cli.daemon_commands import demo, run_command, scheduler_command, serve_command, worker_command
from bot.cli.digest_commands import resend_command, send_now
from bot.cli.entry_commands import entries_app
from bot.cli.ingest_commands import dumps_app, feeds_app
from bot.cli.library_commands import library_app
from bot.cli.llm_commands import llm_app
from bot.cli.output import EXIT_USAGE, err
from bot.cli.preview_commands import preview
from bot.cli.ranker_commands import rankers_app
from bot.cli.report_commands import history, stats
from bot.cli.returned_mail_commands import bounces_app
from bot.cli.shell import app
from bot.cli.subscriber_commands import subscribers_app
from bot.cli.tag_commands import tags_app
from bot.cli.zotero_commands import zotero_line as _zotero_commands  # noqa: F401  (registers `library sync`)
from bot.domain.text import is_utf8_name

# The top-level commands, in the order --help lists them: a day's work first.
app.command("preview")(preview)
app.command("run")(run_command)
app.command("scheduler")(scheduler_command)
app.command("worker")(worker_command)
app.command("serve")(serve_command)
app.command("send-now")(send_now)
app.command("resend")(resend_command)
app.command("demo")(demo)
app.command("history")(history)
app.command("stats")(stats)
app.add_typer(dumps_app, name="dumps")
app.add_typer(entries_app, name="entries")
app.add_typer(feeds_app, name="feeds")
app.add_typer(db_app, name="db")
app.add_typer(config_app, name="config")
app.add_typer(smtp_app, name="smtp")
app.add_typer(bounces_app, name="bounces")
app.add_typer(rankers_app, name="rankers")
app.add_typer(llm_app, name="llm")
subscribers_app.add_typer(library_app, name="library")
app.add_typer(library_app, name="library")
app.add_typer(subscribers_app, name="subscribers")
app.add_typer(channels_app, name="channels")
app.add_typer(tags_app, name="tags")
app.command("init")(init_command)
app.command("sink")(sink_command)


def main() -> None:
    import typer.main
    from typer.core import TyperGroup

    from bot.cli.command_line import plain_help, run_command_line

    for position, argument in enumerate(sys.argv[1:], start=1):
        if not is_utf8_name(argument):  # the shell passed bytes that are not UTF-8
            shown = argument.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            err.print(f"error: argument {position} is not valid UTF-8: {shown!r}", markup=False)
            raise SystemExit(EXIT_USAGE)
    command = typer.main.get_command(app)
    if not isinstance(command, TyperGroup):  # the app has command groups: Typer makes it a group
        raise TypeError(f"the command line is a {type(command).__name__}, not a group")
    plain_help(command)
    raise SystemExit(run_command_line(command))
