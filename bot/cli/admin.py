"""CLI commands ``db`` (migrations), ``config`` (the effective configuration),
``smtp test`` (the SMTP connection, step by step), ``init`` (an editable copy of
the shipped files) and ``sink`` (a local SMTP server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from bot.cli.context import upgrade_store
from bot.cli.output import EXIT_USAGE, fail, out
from bot.cli.shell import command_group, ctx_of
from bot.domain.text import plural

db_app = command_group(
    "The store as a whole: its schema (Alembic migrations), retention, backup, restore, the copy to "
    "PostgreSQL and its signing key."
)


config_app = command_group("Inspect the effective configuration.")


smtp_app = command_group("The SMTP connection digests go out on.")


@smtp_app.command("test")
def smtp_test(
    ctx: typer.Context,
    to: Annotated[str | None, typer.Option("--to", help="Also send one test message to this address.")] = None,
) -> None:
    """Connect to smtp.host as delivery does and report each step: resolved, connected,
    the name it greets with (EHLO) and what the server offers, TLS version and
    certificate, AUTH mechanisms offered, login, and (with --to) one test message.
    Exit 1 at the first step that fails; the password is never shown."""
    import asyncio
    from datetime import UTC, datetime

    from bot.delivery.smtp import helo_name
    from bot.delivery.smtp_probe import Step, probe
    from bot.mail.message import envelope_address
    from bot.mail.notices import test_message
    from bot.subscribers.fields import SubscriberInputError, clean_email

    c = ctx_of(ctx)
    recipient = None
    if to is not None:
        try:
            recipient = envelope_address(clean_email(to))
        except SubscriberInputError as exc:
            fail(f"--to: {str(exc).removeprefix('email: ')}", EXIT_USAGE)

    def report(step: Step) -> None:
        out.print(f"{'ok  ' if step.ok else 'FAIL'} {step.name:<8} {step.detail}", markup=False)

    smtp, sender = c.settings.smtp, c.settings.sender
    message = test_message(sender, to_address=recipient, now=datetime.now(UTC)) if recipient else None
    passed = asyncio.run(
        probe(
            smtp,
            smtp.resolved_password(),
            sender=envelope_address(sender.from_address),
            helo=helo_name(smtp.helo_name, sender.from_address),
            message=message,
            recipient=recipient,
            report=report,
        )
    )
    if not passed:
        raise typer.Exit(1)


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply pending migrations (run automatically on start for SQLite)."""
    from bot.store import engine as store_engine

    c = ctx_of(ctx)
    upgrade_store(c.engine)
    out.print(f"database at revision {store_engine.current_revision(c.engine)}")


@db_app.command("current")
def db_current(ctx: typer.Context) -> None:
    """Show the schema revision of the database and of this code."""
    from bot.store import engine as store_engine

    c = ctx_of(ctx)
    out.print(f"database: {store_engine.current_revision(c.engine) or 'empty'}; code: {store_engine.head_revision()}")


@config_app.command("show")
def config_show(ctx: typer.Context) -> None:
    """Print the effective configuration as JSON (secrets masked)."""
    print(json.dumps(ctx_of(ctx).settings.redacted(), indent=2))


def init_command(
    folder: Annotated[Path, typer.Argument(help="Where to write (created when missing).", metavar="DIR")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that are already there.")] = False,
) -> None:
    """Write an editable copy of the configuration, tag rules, example subscribers and
    templates into DIR.  Run digestbot from DIR afterwards (it reads
    config/digestbot.toml there), or pass --config DIR/config/digestbot.toml."""
    from bot.tools.starter import StarterExists, write_starter

    try:
        written = write_starter(folder, overwrite=force)
    except StarterExists as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or folder}: {exc.strerror}")
    out.print(f"wrote {plural(len(written), 'file')} to {folder}", markup=False)
    out.print(f"next: cd {folder} && digestbot config show", markup=False)


def sink_command(
    ctx: typer.Context,
    port: Annotated[
        int | None, typer.Option("--port", min=1, max=65535, help="Port to listen on (default: smtp.port).")
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    folder: Annotated[
        Path, typer.Option("--dir", help="Where messages go (.eml, .html, index.html).", metavar="DIR")
    ] = Path("var/inbox"),
) -> None:
    """A local SMTP server that keeps every message it accepts, as the demo's does:
    DIR/NNNN.eml, its HTML part as NNNN.html and an index.html to open in a browser.
    For trying a configuration without a real mail server (smtp.host/port pointing
    here, tls = "none"; it listens on smtp.port unless told otherwise).  Ctrl-C or
    SIGTERM stops it."""
    import signal
    import threading

    from bot.tools.inbox_index import last_number
    from bot.tools.sink import Received, Sink, SinkHandler

    def announce(received: Received, saved: Path | None) -> None:
        subject = str(received.message["Subject"] or "")
        out.print(f"{saved.name if saved else '-'}: to {', '.join(received.recipients)}: {subject}", markup=False)

    if port is None:
        port = ctx_of(ctx).settings.smtp.port  # where delivery sends: one place to set it
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--dir {folder}: {exc.strerror}", EXIT_USAGE)
    handler = SinkHandler(inbox=folder, keep_index=True, first_number=last_number(folder), on_received=announce)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        sink = Sink(handler, port, host=host).__enter__()
    except (OSError, RuntimeError) as exc:
        fail(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}")
    out.print(f"listening on {host}:{port}; messages go to {folder}/ (open {folder / 'index.html'})", markup=False)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sink.__exit__()
    out.print(f"stopped after {plural(len(handler.received), 'message')}", markup=False)
