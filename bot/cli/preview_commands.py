"""CLI: ``preview``, what a reader's next digest would hold and why, or the message
itself, or a day's table of every reader.  A thin shell over ``bot.plan.next_digest``
and ``bot.mail.preview``; sends and records nothing."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.context import Context
from bot.cli.entry_lists import print_candidates
from bot.cli.library_commands import train_on_demand
from bot.cli.output import EXIT_USAGE, fail, out, print_json_lines
from bot.cli.shell import JsonOption, ctx_of, find_subscriber, now, parse_date
from bot.cli.tables import Column, fitted
from bot.domain import SubscriberStatus
from bot.domain.text import plural
from bot.files import write_whole

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from bot.domain import Subscriber


def preview(
    ctx: typer.Context,
    email: Annotated[str | None, typer.Argument(help="The subscriber's address (not with --all).")] = None,
    date_: Annotated[str | None, typer.Option("--date", help="As of this day's send time (default: now).")] = None,
    eml: Annotated[Path | None, typer.Option("--eml", help="Write the next digest's message (.eml) here.")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="Write the next digest's HTML part here.")] = None,
    show: Annotated[bool, typer.Option("--open", help="Open the next digest's HTML part in a browser.")] = False,
    every: Annotated[bool, typer.Option("--all", help="A table of every active subscriber's digest that day.")] = False,
    as_json: JsonOption = False,
) -> None:
    """What EMAIL's next digest would contain and why; sends and records nothing.
    --eml/--html/--open: the message itself, as the sender would send it (but for
    Date and Message-ID).  --all: who gets how many entries on --date."""
    c = ctx_of(ctx)
    day = parse_date(date_, "--date")
    if every:
        if email or eml or html or show:
            fail("--all lists every subscriber: give no EMAIL, --eml, --html or --open with it", EXIT_USAGE)
        _preview_day(c, day, as_json)
        return
    if email is None:
        fail("give EMAIL, or --all", EXIT_USAGE)
    factory = c.sessions()
    subscriber = find_subscriber(factory, email)
    train_on_demand(factory, subscriber.id, c.rules)
    if eml or html or show:
        c.link_key()  # the message carries signed links
        _preview_message(c, factory, subscriber, day, eml=eml, html=html, show=show)
        return
    _preview_entries(c, factory, subscriber, day, as_json)


def _preview_entries(
    c: Context, factory: sessionmaker[Session], subscriber: Subscriber, day: date | None, as_json: bool
) -> None:
    from bot.choose.candidates import local_send_time
    from bot.plan.next_digest import preview_entries, when_note

    at = now()
    as_of = local_send_time(subscriber, day) if day else at
    seen = preview_entries(factory, c.settings, c.rules, subscriber, as_of=as_of, now=at)
    label = (
        f"{subscriber.email} ({subscriber.status.value}) as of {as_of:%Y-%m-%d %H:%M} UTC, filter {subscriber.filter}"
    )
    print_candidates(seen.found, f"{label}: {plural(len(seen.found), 'entry', 'entries')}", as_json)
    if as_json:
        return
    if seen.ranked_by_taste:
        out.print(
            f"ranked by their model: score + 3 x taste; liked: taste above {subscriber.taste_threshold:.2f}",
            markup=False,
        )
    if not seen.found:
        out.print(seen.empty_note, markup=False)
    if not day:
        out.print(when_note(factory, c.settings, subscriber, as_of), markup=False)


def _preview_message(
    c: Context,
    factory: sessionmaker[Session],
    subscriber: Subscriber,
    day: date | None,
    *,
    eml: Path | None,
    html: Path | None,
    show: bool,
) -> None:
    import email
    import tempfile
    import webbrowser
    from email.policy import default

    from bot.mail.preview import next_message
    from bot.plan.next_digest import next_day

    if subscriber.status is not SubscriberStatus.ACTIVE:
        fail(f"{subscriber.email} is {subscriber.status.value}: they get no digest")
    at = now()
    if not day:
        with factory() as session:
            day = next_day(session, subscriber, at)
    try:
        found = next_message(factory, c.parts, subscriber, day=day, now=at)
    except RuntimeError as exc:  # a template or entry that cannot be built: what delivery would record
        fail(f"{subscriber.email}: {exc}")
    if found is None:
        fail(f"{subscriber.email} would get no digest on {day}: nothing new for them, or that day's is planned")
    part = email.message_from_bytes(found.data, policy=default).get_body(preferencelist=("html",))
    page = part.get_content() if part is not None else ""
    if show and html is None:
        html = Path(tempfile.mkdtemp(prefix="digestbot-preview-")) / "digest.html"
    try:
        if eml is not None:
            write_whole(eml, found.data)
        if html is not None:
            write_whole(html, page.encode("utf-8"))
    except OSError as exc:
        fail(f"{exc.filename}: cannot write: {exc.strerror}")
    sizes = ((eml, len(found.data)), (html, len(page.encode("utf-8"))))
    where = ", ".join(f"{path} ({size:,} bytes)" for path, size in sizes if path is not None)
    out.print(
        f"{subscriber.email}, {found.day} (sends at {found.send_at:%Y-%m-%d %H:%M} UTC): "
        f"{plural(found.entries, 'entry', 'entries')} -> {where}",
        markup=False,
    )
    if show and html is not None:
        webbrowser.open(html.resolve().as_uri())


def _preview_day(c: Context, day: date | None, as_json: bool) -> None:
    from bot.plan.next_digest import day_table
    from bot.store.subscribers import list_subscribers

    factory = c.sessions()
    day = day or now().date()
    with factory() as session:
        everyone = list_subscribers(session, status=SubscriberStatus.ACTIVE)
    lines = day_table(factory, c.settings, c.rules, everyone, day, now())
    if as_json:
        print_json_lines(
            [
                {
                    "email": x.email,
                    "send_at": x.send_at,
                    "entries": x.entries,
                    "held_back": x.held_back,
                    "state": x.state,
                }
                for x in lines
            ]
        )
        return
    columns = [
        Column("subscriber", whole=True),
        Column("sends at (UTC)", whole=True),
        Column("entries", whole=True, justify="right"),
        Column("held back", whole=True, drop=1, justify="right"),
        Column("digest", whole=True),  # its state once planned: "sent", "empty"; "to come" before
    ]
    rows = [
        [x.email, f"{x.send_at:%Y-%m-%d %H:%M}", str(x.entries), str(x.held_back), x.state or "to come"] for x in lines
    ]
    out.print(fitted(columns, rows, width=out.width, title=f"Digests of {day}"))
    going = sum(1 for x in lines if x.entries)
    out.print(f"{plural(going, 'digest')} with {sum(x.entries for x in lines)} entries in all", markup=False)
