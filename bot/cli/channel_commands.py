"""CLI commands of the channels (docs/channels.md): ``channels add``, ``list``,
``edit``, ``remove`` and ``test``.  Thin shells over ``bot.channels.channel_service``; a
destination is read from a file, never from the command line, and never printed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.choice_options import DigestChoices, with_choice_options
from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, fail, out, print_json_lines
from bot.cli.shell import JsonOption, clean_or_exit, command_group, ctx_of, now

if TYPE_CHECKING:
    from bot.channels.channel_service import Channel
    from bot.domain.channel_states import Service

channels_app = command_group("Chat rooms digests are posted to: Slack, Discord, Mattermost, Telegram, Matrix.")

DestinationFile = Annotated[
    Path | None,
    typer.Option(
        "--destination-file",
        help="A file holding the webhook or Apprise-style URL (a secret: never on the command line).",
    ),
]
ServiceOption = Annotated[
    str | None,
    typer.Option("--service", help="slack, discord, mattermost, telegram or matrix, where the URL does not say."),
]
_CHOICES_STAND_IN = "channel@example.org"  # the choices are checked as a reader's are


def _service(given: str | None) -> Service | None:
    from bot.domain.channel_states import Service

    if given is None:
        return None
    try:
        return Service(given.strip().lower())
    except ValueError:
        fail(f"--service: {given!r} is not one of {', '.join(s.value for s in Service)}", EXIT_USAGE)


def _destination(path: Path) -> str:
    from bot.config import ConfigError, read_secret_file

    try:
        return read_secret_file(path, "--destination-file")
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)


@channels_app.command("add")
@with_choice_options
def channels_add(
    ctx: typer.Context,
    channel: Annotated[str, typer.Argument(help="The channel's name: lower-case letters, digits, - and _.")],
    destination_file: DestinationFile = None,
    service: ServiceOption = None,
    choices: DigestChoices | None = None,
) -> None:
    """Post digests to a chat room, with the same choices a reader has."""
    from bot.channels.channel_service import ChannelError, add_channel

    if destination_file is None:
        fail("--destination-file is required: the file holding the room's webhook URL", EXIT_USAGE)
    c = ctx_of(ctx)
    fields = clean_or_exit(_CHOICES_STAND_IN, choices)
    try:
        added = add_channel(
            c.sessions(), c.settings, channel, _destination(destination_file), fields, now(), _service(service)
        )
    except ChannelError as exc:
        fail(str(exc), EXIT_USAGE)
    out.print(f"added channel {added.name}: {added.shown} (filter: {added.subscriber.filter})", markup=False)


@channels_app.command("edit")
@with_choice_options
def channels_edit(
    ctx: typer.Context,
    channel: Annotated[str, typer.Argument(help="The channel's name.")],
    destination_file: DestinationFile = None,
    service: ServiceOption = None,
    choices: DigestChoices | None = None,
) -> None:
    """Change a channel's choices, or its destination."""
    from bot.channels.channel_service import ChannelError, ChannelNotFound, edit_channel

    c = ctx_of(ctx)
    fields = clean_or_exit(_CHOICES_STAND_IN, choices)
    destination = _destination(destination_file) if destination_file is not None else None
    try:
        changed = edit_channel(c.sessions(), c.settings, channel, fields, now(), destination, _service(service))
    except ChannelError as exc:
        fail(str(exc), EXIT_INPUT_FAILED if isinstance(exc, ChannelNotFound) else EXIT_USAGE)
    out.print(f"changed channel {changed.name}: {changed.shown} (filter: {changed.subscriber.filter})", markup=False)


@channels_app.command("list")
def channels_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """The channels: name, service and where (masked), choices, status."""
    from bot.channels.channel_service import list_channels
    from bot.cli.tables import Column, fitted

    channels = list_channels(ctx_of(ctx).sessions())
    if as_json:
        print_json_lines([_json(channel) for channel in channels])
        return
    if not channels:
        out.print("no channels (channels add NAME --destination-file F adds one)")
        return
    columns = [
        Column("name", whole=True),
        Column("destination", words=True, share=1),
        Column("filter", wants=14, words=True, share=1),
        Column("sends at", least=19),  # as subscribers list shows it
        Column("cadence", whole=True, drop=1),
        Column("status", whole=True),
    ]
    rows = [
        [
            ch.name,
            ch.shown,
            ch.subscriber.filter,
            f"{ch.subscriber.send_hour:02d}:00 {ch.subscriber.timezone}",
            ch.subscriber.cadence,
            ch.subscriber.status.value,
        ]
        for ch in channels
    ]
    out.print(fitted(columns, rows, width=out.width, title="Channels"))


def _json(channel: Channel) -> dict[str, object]:
    subscriber = channel.subscriber
    return {
        "name": channel.name,
        "service": channel.service.value,
        "destination": channel.shown,
        "filter": subscriber.filter,
        "timezone": subscriber.timezone,
        "send_hour": subscriber.send_hour,
        "cadence": subscriber.cadence,
        "status": subscriber.status.value,
        "held_until": channel.held_until.isoformat() if channel.held_until else None,
    }


@channels_app.command("remove")
def channels_remove(ctx: typer.Context, name: Annotated[str, typer.Argument(help="The channel's name.")]) -> None:
    """Forget a channel: its destination, its choices and what it was sent."""
    from bot.channels.channel_service import ChannelError, remove_channel

    try:
        remove_channel(ctx_of(ctx).sessions(), name)
    except ChannelError as exc:
        fail(str(exc))
    out.print(f"removed channel {name}", markup=False)


@channels_app.command("test")
def channels_test(ctx: typer.Context, name: Annotated[str, typer.Argument(help="The channel's name.")]) -> None:
    """Post one short message to a channel now and say what its service answered
    (exit 1 unless it was posted)."""
    from bot.channels.channel_service import ChannelError, post_test_message
    from bot.channels.chat_requests import PostVerdict

    c = ctx_of(ctx)
    try:
        judged = post_test_message(c.sessions(), c.settings, name)
    except ChannelError as exc:
        fail(str(exc))
    if judged.verdict is not PostVerdict.POSTED:
        fail(f"{name}: {judged.verdict.value}: {judged.detail}")
    out.print(f"{name}: posted ({judged.detail})", markup=False)
