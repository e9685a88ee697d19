"""CLI commands of a reader's Zotero library (docs/zotero.md): ``library sync [EMAIL]``,
what ``subscribers edit --zotero-key-file`` / ``--zotero-disconnect`` do, and the line
``subscribers show`` says of a connection.  Thin shells over ``bot.zotero``; never print
or log a key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.library_commands import library_app
from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, fail, out
from bot.cli.shell import ctx_of, find_subscriber, now
from bot.domain.text import plural

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker


@library_app.command("sync")
def library_sync(
    ctx: typer.Context,
    email: Annotated[
        str | None, typer.Argument(help="The subscriber's address (default: every connected reader).")
    ] = None,
) -> None:
    """Sync EMAIL's Zotero library now (or every connected one), whenever it was synced
    last, and say what changed; exit 1 when a library could not be synced."""
    from bot.config import ConfigError
    from bot.store.zotero import due_connections, emails_of
    from bot.zotero.connection import NEW, SYNCED
    from bot.zotero.zotero_pass import zotero_pass

    c = ctx_of(ctx)
    settings, factory = c.settings, c.sessions()
    at = now()
    if email is not None:
        subscriber = find_subscriber(factory, email)
        only, names = [subscriber.id], {subscriber.id: subscriber.email}
    else:
        with factory() as session:
            only = due_connections(session, (NEW, SYNCED), at + timedelta(days=1))
            names = emails_of(session, only)
    try:
        done = zotero_pass(factory, settings, at, only=only)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    if not done.synced:
        out.print(
            "no connected Zotero library to sync"
            if email is None
            else f"{email}: no Zotero library connected (or its connection is broken: connect it again)",
            markup=False,
        )
        raise typer.Exit(EXIT_INPUT_FAILED if email is not None else 0)
    for synced in done.synced:
        out.print(f"{names.get(synced.subscriber_id, synced.subscriber_id)}: {synced.said()}", markup=False)
    out.print(f"{plural(done.requests, 'request')} to {settings.zotero.base_url}", markup=False)
    if any(s.problem or s.broken for s in done.synced):
        raise typer.Exit(EXIT_INPUT_FAILED)


def edit_zotero(ctx: typer.Context, email: str, key_file: Path | None, library: str, disconnect: bool) -> None:
    """``subscribers edit --zotero-key-file F`` / ``--zotero-disconnect``."""
    from bot.config import ConfigError, read_secret_file
    from bot.sealed import sealer_of
    from bot.zotero.api import ZoteroApi
    from bot.zotero.connection import ConnectError, connect
    from bot.zotero.connection import disconnect as forget

    c = ctx_of(ctx)
    settings, factory = c.settings, c.sessions()
    subscriber = find_subscriber(factory, email)
    if disconnect:
        said = "disconnected" if forget(factory, subscriber.id) else "had no Zotero library connected"
        out.print(f"{subscriber.email}: {said}", markup=False)
        return
    assert key_file is not None
    try:
        key = read_secret_file(key_file, "--zotero-key-file")
        sealer = sealer_of(settings)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        with ZoteroApi(settings.zotero) as api:
            connected = connect(factory, api, sealer, subscriber.id, library, key, now())
    except ConnectError as exc:
        fail(f"--zotero-key-file: {exc}")
    out.print(
        f"{subscriber.email}: Zotero {connected.library} connected ({connected.can}); "
        "the daemon syncs it within a minute ('library sync' does it now)",
        markup=False,
    )


def zotero_line(factory: sessionmaker[Session], subscriber_id: int) -> str:
    """What ``subscribers show`` says of the reader's Zotero connection."""
    from bot.zotero.connection import shown

    zotero = shown(factory, subscriber_id)
    if zotero is None:
        return "not connected"
    if zotero.broken:
        return f"{zotero.library}, {zotero.can}; broken: {zotero.problem}"
    synced = f"synced {zotero.synced_at:%Y-%m-%d %H:%M} UTC" if zotero.synced_at else "not synced yet"
    return f"{zotero.library}, {zotero.can}; {synced}"
