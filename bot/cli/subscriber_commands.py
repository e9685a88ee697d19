"""CLI commands ``subscribers``: add, edit, pause, resume, remove (the CSV file in
``subscriber_csv_commands``, list and show in ``subscriber_show_commands``).  Every value
is validated by the subscriber service; never writes SQL itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.choice_options import DigestChoices, with_choice_options
from bot.cli.context import Context
from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, err, fail, out
from bot.cli.shell import clean_or_exit, command_group, ctx_of, now
from bot.cli.subscriber_views import operator_note, operator_user, subscriber_table

if TYPE_CHECKING:
    from bot.domain import SubscriberFields

subscribers_app = command_group("Manage subscribers: add, import, edit, pause, remove.")


@subscribers_app.command("add")
@with_choice_options
def subscribers_add(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="Email address (IDN domains accepted).")],
    confirm: Annotated[
        bool,
        typer.Option(
            "--confirm", help="Mail EMAIL a link to confirm (double opt-in) instead of subscribing them at once."
        ),
    ] = False,
    choices: DigestChoices | None = None,
) -> None:
    """Subscribe EMAIL (an unsubscribed address is re-activated; what it was sent stays sent)."""
    from bot.subscribers.subscriptions import AlreadySubscribed, add

    c = ctx_of(ctx)
    fields = clean_or_exit(email, choices)
    if confirm:
        _ask_to_confirm(c, fields)
        return
    try:
        subscriber, created = add(c.sessions(), c.settings, fields, now(), vouched_by=operator_note("subscribers add"))
    except AlreadySubscribed as exc:
        fail(str(exc))
        return
    out.print(
        f"{'added' if created else 're-subscribed'} {subscriber.email} (filter: {subscriber.filter})", markup=False
    )
    _warn_about_filter(c, fields.filter)


def _ask_to_confirm(c: Context, fields: SubscriberFields) -> None:
    """``add --confirm``: a sign-up as the page makes one, mailed now."""
    import asyncio

    from bot.store.subscribers import get_subscriber
    from bot.subscribers.optin import Origin, request_signup, send

    with c.sessions()() as session:
        existing = get_subscriber(session, fields.email)
    if existing is not None and existing.status.subscribed:
        fail(f"{existing.email} is already subscribed (use 'subscribers edit' to change it)")
    origin = Origin("digestbot subscribers add --confirm", "", operator_note("requested"))
    outgoing = request_signup(c.sessions(), c.settings, c.link_key(), fields, origin=origin, now=now())
    if outgoing is None:
        fail(f"{fields.email}: a sign-up mail went to this address a moment ago, or it just unsubscribed; not sent")
    elif not asyncio.run(send(c.settings, outgoing)):
        fail(f"{fields.email}: the confirmation mail was not accepted by {c.settings.smtp.host}")
    else:
        out.print(f"pending {fields.email}: confirmation link mailed (valid {c.settings.web.confirm_hours} h)")
        _warn_about_filter(c, fields.filter)


def _warn_about_filter(c: Context, filter_text: str | None) -> None:
    """Say so when the filter names a tag nothing carries (a typo, most likely)."""
    from bot.subscribers.subscriptions import filter_warning

    if filter_text:
        note = filter_warning(c.sessions(), c.rules, filter_text)
        if note:
            err.print(f"warning: filter {filter_text!r}: {note}", markup=False)


@subscribers_app.command("edit")
@with_choice_options
def subscribers_edit(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    language: Annotated[
        str | None,
        typer.Option("--language", help="Their TL;DRs' language: one of llm.languages (docs/llm.md)."),
    ] = None,
    zotero_key_file: Annotated[
        Path | None,
        typer.Option(
            "--zotero-key-file",
            help="Connect their Zotero library with the API key in this file (never on the command line).",
        ),
    ] = None,
    zotero_library: Annotated[
        str, typer.Option("--zotero-library", help='With --zotero-key-file: "user" (theirs) or "group:ID".')
    ] = "user",
    zotero_disconnect: Annotated[
        bool, typer.Option("--zotero-disconnect", help="Forget their Zotero library's connection and key.")
    ] = False,
    choices: DigestChoices | None = None,
) -> None:
    """Change the given fields of a subscriber; connect or disconnect their Zotero
    library (docs/zotero.md)."""
    from bot.subscribers.fields import SubscriberInputError
    from bot.subscribers.subscriptions import SubscriberNotFound, edit

    c = ctx_of(ctx)
    fields = clean_or_exit(email, choices)
    if zotero_key_file is not None or zotero_disconnect:
        from bot.cli.zotero_commands import edit_zotero

        edit_zotero(ctx, email, zotero_key_file, zotero_library, zotero_disconnect)
        if choices is None and language is None:
            return
    try:
        subscriber = edit(c.sessions(), c.settings, fields, now(), language=language)
    except SubscriberInputError as exc:
        fail(str(exc).replace("language: ", "--language: ", 1), EXIT_USAGE)
    except SubscriberNotFound as exc:
        fail(str(exc))
        return
    out.print(subscriber_table([subscriber], "Updated"))
    _warn_about_filter(c, fields.filter)


def _set_status(ctx: typer.Context, email: str, command: str) -> None:
    from bot.subscribers.fields import StatusChangeRefused, SubscriberInputError
    from bot.subscribers.subscriptions import SubscriberNotFound, operator_change

    try:
        subscriber, said = operator_change(ctx_of(ctx).sessions(), email, command, now(), detail=operator_user())
    except SubscriberInputError as exc:
        fail(str(exc), EXIT_INPUT_FAILED if isinstance(exc, StatusChangeRefused) else EXIT_USAGE)
    except SubscriberNotFound as exc:
        fail(str(exc))
    out.print(f"{said} {subscriber.email}", markup=False)


@subscribers_app.command("pause")
def subscribers_pause(
    ctx: typer.Context, email: Annotated[str, typer.Argument(help="The subscriber's address.")]
) -> None:
    """Stop sending digests to EMAIL until resumed (nothing is lost meanwhile); only an
    active subscriber can be paused."""
    _set_status(ctx, email, "pause")


@subscribers_app.command("resume")
def subscribers_resume(
    ctx: typer.Context, email: Annotated[str, typer.Argument(help="The subscriber's address.")]
) -> None:
    """Send digests to EMAIL again (also clears a bounce once the address is fixed); a
    pending address confirms its link, or is vouched for by 'subscribers add'."""
    _set_status(ctx, email, "resume")


@subscribers_app.command("remove")
def subscribers_remove(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    purge: Annotated[
        bool, typer.Option("--purge", help="Really delete the subscriber and their history (privacy requests).")
    ] = False,
) -> None:
    """Unsubscribe EMAIL, keeping what was sent so a re-subscribe never resends old entries."""
    from bot.subscribers.fields import SubscriberInputError, clean_email
    from bot.subscribers.subscriptions import SubscriberNotFound, remove

    c = ctx_of(ctx)
    try:
        subscriber = remove(
            c.sessions(),
            clean_email(email),
            purge=purge,
            now=now(),
            page="digestbot subscribers remove",
            detail=operator_user(),
        )
    except SubscriberInputError as exc:
        fail(str(exc), EXIT_USAGE)
        return
    except SubscriberNotFound as exc:
        fail(str(exc))
        return
    out.print(f"{'purged' if purge else 'unsubscribed'} {subscriber.email}", markup=False)
