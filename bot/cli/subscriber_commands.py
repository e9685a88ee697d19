"""CLI commands ``subscribers``: add, edit, pause, remove, import, export, list, show.
Every value is validated by the subscriber service; never writes SQL itself."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bot.cli.choice_options import with_choice_options
from bot.cli.digest_views import digest_json, digest_story, digest_table
from bot.cli.shell import (
    EXIT_INPUT_FAILED,
    EXIT_USAGE,
    Context,
    JsonOption,
    clean_or_exit,
    command_group,
    ctx_of,
    err,
    fail,
    find_subscriber,
    jsonable,
    new_table,
    now,
    out,
    plural,
    print_json_lines,
)
from bot.cli.subscriber_views import consent_json, consent_line
from bot.cli.tables import Column, fitted

if TYPE_CHECKING:
    from rich.table import Table
from bot.domain import SubscriberStatus
from bot.subscribers.settings import SETTINGS, shown

subscribers_app = command_group("Manage subscribers: add, import, edit, pause, remove.")


def _subscriber_json(s: Any) -> dict[str, Any]:
    from bot.subscribers.subscriptions import held_because

    return {
        "email": s.email,
        "name": s.name,
        "filter": s.filter,
        "timezone": s.timezone,
        "send_hour": s.send_hour,
        "status": s.status,
        "backfill": s.backfill,
        "cadence": s.cadence,
        **{setting.name: getattr(s, setting.name) for setting in SETTINGS},
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        **({"held": f"{fault}; never planned until 'subscribers edit' mends it"} if (fault := held_because(s)) else {}),
    }


def _subscriber_table(subscribers: list[Any], title: str) -> Table:
    columns = [
        Column("email", whole=True),
        Column("name", drop=2),
        Column("filter"),
        Column("zone", whole=True, drop=1),
        Column("hour", whole=True),
        Column("cadence", whole=True),
        Column("status", whole=True),
    ]
    rows = [
        [s.email, s.name, s.filter, s.timezone, f"{s.send_hour:02d}:00", s.cadence, _status(s)] for s in subscribers
    ]
    return fitted(columns, rows, width=out.width, title=title)


def _status(subscriber: Any) -> str:
    """Its status, and "held" when a stored setting keeps it out of planning (``show`` says
    which, a filter that does not parse included: ``list`` reads no filter)."""
    return f"{subscriber.status.value}, held" if subscriber.fault else subscriber.status.value


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
    choices: dict[str, Any] | None = None,
) -> None:
    """Subscribe EMAIL (an unsubscribed address is re-activated; what it was sent stays sent)."""
    from bot.subscribers.subscriptions import AlreadySubscribed, add

    c = ctx_of(ctx)
    fields = clean_or_exit(email, **(choices or {}))
    if confirm:
        _ask_to_confirm(c, fields)
        return
    try:
        subscriber, created = add(c.sessions(), c.settings, fields, now(), vouched_by=_operator("subscribers add"))
    except AlreadySubscribed as exc:
        fail(str(exc))
        return
    out.print(
        f"{'added' if created else 're-subscribed'} {subscriber.email} (filter: {subscriber.filter})", markup=False
    )
    _warn_about_filter(c, fields.filter)


def _operator(command: str) -> str:
    """Who vouches for an operator's add, for the consent record."""
    return f"{command}, {_by()}"


def _by() -> str:
    """The operator who ran this command, for the consent record."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or passwd
        user = "unknown user"
    return f"by {user}"


def _ask_to_confirm(c: Context, fields: Any) -> None:
    """``add --confirm``: a sign-up as the page makes one, mailed now."""
    import asyncio

    from bot.store.subscribers import get_subscriber
    from bot.subscribers.optin import Origin, request_signup, send

    with c.sessions()() as session:
        existing = get_subscriber(session, fields.email)
    if existing is not None and existing.status.subscribed:
        fail(f"{existing.email} is already subscribed (use 'subscribers edit' to change it)")
    origin = Origin("digestbot subscribers add --confirm", "", _operator("requested"))
    outgoing = request_signup(c.sessions(), c.settings, c.signing_key(), fields, origin=origin, now=now())
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
    choices: dict[str, Any] | None = None,
) -> None:
    """Change the given fields of a subscriber."""
    from bot.subscribers.subscriptions import SubscriberInputError, SubscriberNotFound, edit

    c = ctx_of(ctx)
    fields = clean_or_exit(email, **(choices or {}))
    try:
        subscriber = edit(c.sessions(), c.settings, fields, now(), language=language)
    except SubscriberInputError as exc:
        fail(str(exc).replace("language: ", "--language: ", 1), EXIT_USAGE)
    except SubscriberNotFound as exc:
        fail(str(exc))
        return
    out.print(_subscriber_table([subscriber], "Updated"))
    _warn_about_filter(c, fields.filter)


def _set_status(ctx: typer.Context, email: str, command: str) -> None:
    from bot.subscribers import subscriptions as service

    try:
        subscriber, said = service.operator_change(ctx_of(ctx).sessions(), email, command, now(), detail=_by())
    except service.SubscriberInputError as exc:
        fail(str(exc), EXIT_INPUT_FAILED if isinstance(exc, service.StatusChangeRefused) else EXIT_USAGE)
    except service.SubscriberNotFound as exc:
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
    from bot.subscribers.subscriptions import SubscriberInputError, SubscriberNotFound, clean_email, remove

    c = ctx_of(ctx)
    try:
        subscriber = remove(
            c.sessions(), clean_email(email), purge=purge, now=now(), page="digestbot subscribers remove", detail=_by()
        )
    except SubscriberInputError as exc:
        fail(str(exc), EXIT_USAGE)
        return
    except SubscriberNotFound as exc:
        fail(str(exc))
        return
    out.print(f"{'purged' if purge else 'unsubscribed'} {subscriber.email}", markup=False)


@subscribers_app.command("import")
def subscribers_import(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(
            help="CSV with a header; columns: email, name, filter, timezone, send_hour, status, backfill, cadence, "
            + ", ".join(f"{s.name} (yes or no)" for s in SETTINGS)
            + "."
        ),
    ],
    as_json: JsonOption = False,
) -> None:
    """Upsert subscribers from CSV (idempotent).  Good rows are imported even when
    others are bad; every bad row is listed with its line number.  Exit 1 if any was bad."""
    from bot.subscribers.csv_io import import_csv

    c = ctx_of(ctx)
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{file}: cannot read: {exc}", EXIT_INPUT_FAILED)
        return
    report = import_csv(
        c.sessions(), c.settings, text, now(), rules=c.rules, vouched_by=_operator(f"subscribers import {file}")
    )
    if as_json:
        print_json_lines(
            [
                {
                    "created": report.created,
                    "updated": report.updated,
                    "unchanged": report.unchanged,
                    "bad_rows": len(report.errors),
                }
            ]
            + [{"line": e.line, "error": e.reason} for e in report.errors]
            + [{"line": w.line, "warning": w.reason} for w in report.warnings]
        )
    else:
        counts = f"{report.created} added, {report.updated} updated, {report.unchanged} unchanged"
        out.print(f"{file}: {counts}, {plural(len(report.errors), 'bad row')}", markup=False)
        if report.errors:
            columns = [Column("line", whole=True, justify="right"), Column("reason")]
            rows = [[str(e.line), e.reason] for e in report.errors]
            err.print(fitted(columns, rows, width=err.width, title="Bad rows (not imported)"))
        for w in report.warnings:
            err.print(f"warning: line {w.line}: {w.reason}", markup=False)
    if report.errors:
        raise typer.Exit(EXIT_INPUT_FAILED)


@subscribers_app.command("export")
def subscribers_export(
    ctx: typer.Context,
    status: Annotated[SubscriberStatus | None, typer.Option(help="Only subscribers with this status.")] = None,
    spreadsheet: Annotated[
        bool,
        typer.Option(
            "--spreadsheet",
            help="Prefix cells that start with = + - @ with a ' so a spreadsheet shows them as text "
            "(the file then no longer round-trips through 'import').",
        ),
    ] = False,
    library: Annotated[
        str | None, typer.Option("--library", help="Print this subscriber's library as CSL-JSON instead.")
    ] = None,
) -> None:
    """Print all subscribers as CSV, exactly as stored: the format 'import' reads."""
    from bot.subscribers.csv_io import export_csv

    if library is not None:
        from bot.cli.library_commands import print_library

        print_library(ctx, library)
        return
    sys.stdout.write(export_csv(ctx_of(ctx).sessions(), status, spreadsheet=spreadsheet))


@subscribers_app.command("list")
def subscribers_list(
    ctx: typer.Context,
    status: Annotated[SubscriberStatus | None, typer.Option(help="Only subscribers with this status.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only subscribers whose filter names this tag.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Subscribers, by address."""
    from bot.choose.filters import Tag, atoms, parse_filter
    from bot.store.subscribers import list_subscribers

    with ctx_of(ctx).sessions()() as session:
        subscribers = list_subscribers(session, status=status)
    if tag is not None:
        wanted = Tag(tag.casefold())
        subscribers = [s for s in subscribers if wanted in atoms(parse_filter(s.filter))]
    if as_json:
        print_json_lines([_subscriber_json(s) for s in subscribers])
        return
    out.print(_subscriber_table(subscribers, f"Subscribers ({len(subscribers)})"))


@subscribers_app.command("show")
def subscribers_show(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    as_json: JsonOption = False,
) -> None:
    """One subscriber's settings, their library and ratings, how they consented (and
    unsubscribed or subscribed again), their last digests, and the bounces and
    complaints read from the inbox."""
    from bot.cli.report_commands import return_json, returns_table
    from bot.store.consents import consents_of
    from bot.store.digests import list_digests
    from bot.store.returns import returns_of
    from bot.taste.service import taste_summary

    c = ctx_of(ctx)
    factory = c.sessions()
    subscriber = find_subscriber(factory, email)
    with factory() as session:
        digests = list_digests(session, subscriber_id=subscriber.id, limit=10)
        consents = consents_of(session, subscriber.id)
        returned = returns_of(session, subscriber.id)
    taste = taste_summary(factory, subscriber)
    at = now()
    stories = [digest_story(d, c.settings.schedule.day_closes_hour, at) for d in digests]
    if as_json:
        data = _subscriber_json(subscriber)
        data["taste"] = {"library": taste.papers, "more": taste.more, "less": taste.less, "ranked": taste.ranked}
        data["taste"] |= {"threshold": taste.threshold, "interests_with_models": list(taste.interests)}
        data["consent"] = [consent_json(e) for e in consents]
        data["last_digests"] = [digest_json(d, story) for d, story in zip(digests, stories, strict=True)]
        data["returned_mail"] = [return_json(e) for e in returned]
        print_json_lines([data])
        return
    table = new_table(show_header=False, box=None, title=subscriber.email)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    settings = {setting.name for setting in SETTINGS}
    for key, value in _subscriber_json(subscriber).items():
        table.add_row(key.replace("_", " "), shown(value) if key in settings else str(jsonable(value)))
    table.add_row("library", plural(taste.papers, "paper"))
    table.add_row("ratings", f"{taste.more} more like this, {taste.less} less like this")
    ranked = "a model of their own ranks their digests" if taste.ranked else "not ranked by a model yet"
    table.add_row("taste", f"{ranked}; liked means a taste score above {taste.threshold:.2f}")
    for event in consents:
        table.add_row("consent", consent_line(event))
    if not consents:
        table.add_row("consent", "none recorded (added before consent was recorded)")
    out.print(table)
    if digests:
        out.print(digest_table(digests, "Last digests", stories, width=out.width, subscriber=False))
    else:
        out.print("Last digests: none yet", markup=False)
    if returned:
        out.print(returns_table(returned))
