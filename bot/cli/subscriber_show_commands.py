"""CLI commands ``subscribers list`` and ``show``: who is subscribed, and one reader's
whole record (settings, library and ratings, consent, last digests, returned mail).
Thin shells over the store's and the taste service's reads; never writes."""

from __future__ import annotations

from typing import Annotated

import typer

from bot.cli.digest_views import digest_json, digest_story, digest_table
from bot.cli.output import jsonable, new_table, out, print_json_lines
from bot.cli.shell import JsonOption, ctx_of, find_subscriber, now
from bot.cli.subscriber_commands import subscribers_app
from bot.cli.subscriber_views import consent_json, consent_line, subscriber_json, subscriber_table
from bot.cli.zotero_commands import zotero_line
from bot.domain import SubscriberStatus
from bot.domain.text import plural
from bot.subscribers.settings import SETTINGS, shown


@subscribers_app.command("list")
def subscribers_list(
    ctx: typer.Context,
    status: Annotated[SubscriberStatus | None, typer.Option(help="Only subscribers with this status.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only subscribers whose filter names this tag.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Subscribers, by address."""
    from bot.choose.filter_terms import Tag, atoms
    from bot.choose.filters import parse_filter
    from bot.store.subscribers import list_subscribers

    with ctx_of(ctx).sessions()() as session:
        subscribers = list_subscribers(session, status=status)
    if tag is not None:
        wanted = Tag(tag.casefold())
        subscribers = [s for s in subscribers if wanted in atoms(parse_filter(s.filter))]
    if as_json:
        print_json_lines([subscriber_json(s) for s in subscribers])
        return
    out.print(subscriber_table(subscribers, f"Subscribers ({len(subscribers)})"))


@subscribers_app.command("show")
def subscribers_show(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    as_json: JsonOption = False,
) -> None:
    """One subscriber's settings, their library and ratings, how they consented (and
    unsubscribed or subscribed again), their last digests, and the bounces and
    complaints read from the inbox."""
    from bot.cli.returned_mail_commands import return_json, returns_table
    from bot.subscribers.records import subscriber_record

    c = ctx_of(ctx)
    factory = c.sessions()
    subscriber = find_subscriber(factory, email)
    record = subscriber_record(factory, subscriber)
    digests, consents, returned, taste = record.digests, record.consents, record.returned, record.taste
    at = now()
    stories = [digest_story(d, c.settings.schedule.day_closes_hour, at) for d in digests]
    zotero_said = zotero_line(factory, subscriber.id)
    if as_json:
        data = subscriber_json(subscriber)
        data["taste"] = {
            "library": taste.papers,
            "more": taste.more,
            "less": taste.less,
            "ranked": taste.ranked,
            "threshold": taste.threshold,
            "interests_with_models": list(taste.interests),
        }
        data["zotero"] = zotero_said
        data["consent"] = [consent_json(e) for e in consents]
        data["last_digests"] = [digest_json(d, story) for d, story in zip(digests, stories, strict=True)]
        data["returned_mail"] = [return_json(e) for e in returned]
        print_json_lines([data])
        return
    table = new_table(show_header=False, boxed=False, title=subscriber.email)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    settings = {setting.name for setting in SETTINGS}
    for key, value in subscriber_json(subscriber).items():
        said = shown(value) if key in settings and isinstance(value, bool) else str(jsonable(value))
        table.add_row(key.replace("_", " "), said)
    table.add_row("library", plural(taste.papers, "paper"))
    table.add_row("zotero", zotero_said)
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
