"""Admin CLI: a thin shell over the service functions (ingest, watcher, store), one
module per command group, the shared shell in ``shell``.

Exit codes: 0 ok, 1 some input failed (or a looked-up item is missing),
2 usage or configuration error.  Every list/show command takes ``--json`` and
then prints one JSON object per line with snake_case keys.  Never holds
business logic of its own: anything a command does, the scheduler can call.
"""

from __future__ import annotations

import sys

from bot.cli import db_commands, digest_commands, report_commands, tag_commands  # noqa: F401 - they register on the app
from bot.cli.admin import config_app, db_app, init_command, sink_command, smtp_app
from bot.cli.ingest_commands import dumps_app, entries_app, feeds_app
from bot.cli.library_commands import library_app
from bot.cli.llm_commands import llm_app
from bot.cli.report_commands import bounces_app, rankers_app
from bot.cli.shell import EXIT_USAGE, app, err
from bot.cli.subscriber_commands import subscribers_app
from bot.cli.tag_commands import tags_app
from bot.domain.text import is_utf8_name

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
app.add_typer(subscribers_app, name="subscribers")
app.add_typer(tags_app, name="tags")
app.command("init")(init_command)
app.command("sink")(sink_command)


def main() -> None:
    import typer.main

    from bot.cli.command_line import plain_help, run_command_line

    for position, argument in enumerate(sys.argv[1:], start=1):
        if not is_utf8_name(argument):  # the shell passed bytes that are not UTF-8
            shown = argument.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            err.print(f"error: argument {position} is not valid UTF-8: {shown!r}", markup=False)
            raise SystemExit(EXIT_USAGE)
    command = typer.main.get_command(app)
    plain_help(command)
    raise SystemExit(run_command_line(command))
