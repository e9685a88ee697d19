"""CLI: digests sent outside the schedule: ``send-now`` and ``resend``.  Thin shells
over the planner (``bot.plan``) and the delivery a command starts (``deliveries``)."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.deliveries import deliver_and_tell, tell_ranker
from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, err, fail, out
from bot.cli.shell import MAX_ID, ctx_of, find_subscriber, now, parse_date
from bot.domain.text import plural

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from bot.cli.context import Context
    from bot.domain import DigestState, Subscriber


def send_now(
    ctx: typer.Context,
    emails: Annotated[list[str] | None, typer.Argument(help="Subscribers (default: every active one).")] = None,
) -> None:
    """Send each given subscriber a digest now with what they have not been sent yet
    (outside the daily schedule; entries sent now are not sent again)."""
    from bot.domain import DigestKind
    from bot.plan import plan
    from bot.subscribers.subscriptions import sendable

    c = ctx_of(ctx)
    factory = c.sessions()
    c.link_key()
    chosen, refused = sendable([find_subscriber(factory, e) for e in emails]) if emails else (None, [])
    for line in refused:
        err.print(f"error: {line}", markup=False)
    if chosen == []:
        raise typer.Exit(EXIT_INPUT_FAILED)
    planned = plan(factory, c.settings, c.rules, now=now(), subscribers=chosen, kind=DigestKind.MANUAL)
    nothing = f"; {plural(planned.empty, 'subscriber')} had nothing new" if planned.empty else ""
    out.print(f"queued {plural(len(planned.planned), 'digest')}{nothing}", markup=False)
    tell_ranker(planned, c.settings)
    if deliver_and_tell(c, factory, list(planned.planned)) or refused:
        raise typer.Exit(EXIT_INPUT_FAILED)


def _no_scheduled_digest(factory: sessionmaker[Session], subscriber: Subscriber, day: date) -> str:
    """Why ``resend --subscriber --date`` found nothing, and the digests of that day
    it could mean (a manual digest or a resend is resent by its id)."""
    from bot.store.digests import list_digests

    with factory() as session:
        others = list_digests(session, subscriber_id=subscriber.id, local_date=day)
    message = f"no scheduled digest for {subscriber.email} on {day}"
    if not others:
        return f"{message} (history {subscriber.email} lists their digests)"
    named = ", ".join(f"#{d.id} ({d.kind.value}, {d.state.value})" for d in others)
    return f"{message}; that day has {named}: resend one by its id, e.g. digestbot resend {others[0].id}"


def resend_command(
    ctx: typer.Context,
    digest_id: Annotated[int | None, typer.Argument(min=1, help="The digest to send again.")] = None,
    subscriber: Annotated[
        str | None, typer.Option("--subscriber", help="With --date: that subscriber's scheduled digest.")
    ] = None,
    date_: Annotated[str | None, typer.Option("--date", help="The local day of the digest.")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Resend every failed digest.")] = False,
    unknown: Annotated[
        bool, typer.Option("--unknown", help="Resend every digest whose outcome is unknown (its reader may have it).")
    ] = False,
) -> None:
    """Send a digest again: same entries and summaries, marked as a resend; the
    ledger does not change.  A digest whose outcome is unknown went on the wire with no
    answer seen: its reader may have it already, so it is resent only when asked."""
    from bot.domain import DigestState
    from bot.plan import DigestNotFound, ResendPending, resend
    from bot.plan.resend import ReaderNotActive

    c = ctx_of(ctx)
    factory = c.sessions()
    c.link_key()
    if failed and unknown:
        fail("give --failed or --unknown, not both", EXIT_USAGE)
    if failed or unknown:
        _resend_every(c, factory, DigestState.UNKNOWN if unknown else DigestState.FAILED)
        return
    targets = [_resend_target(factory, digest_id, subscriber, date_)]
    for target in targets:
        _say_if_unknown(factory, target)
    try:
        queued = [resend(factory, c.settings, t, now=now()) for t in targets]
    except (DigestNotFound, ResendPending, ReaderNotActive) as exc:
        fail(str(exc))
        return
    out.print(f"queued {plural(len(queued), 'resend')}: {', '.join(f'#{q}' for q in queued) or 'none'}")
    if deliver_and_tell(c, factory, queued):
        raise typer.Exit(EXIT_INPUT_FAILED)


def _resend_every(c: Context, factory: sessionmaker[Session], state: DigestState) -> None:
    """``resend --failed`` or ``--unknown``: a resend of each such digest, saying first
    what a resend of an unknown one means."""
    from bot.domain import DigestState
    from bot.plan import resend_all

    if state is DigestState.UNKNOWN:
        out.print(
            "digests whose outcome is unknown went on the wire with no answer seen: their readers may have "
            "them already, and get a copy marked as a resend",
            markup=False,
            soft_wrap=True,
        )
    queued = resend_all(factory, c.settings, state, now=now())
    out.print(f"queued {plural(len(queued), 'resend')}: {', '.join(f'#{q}' for q in queued) or 'none'}")
    if deliver_and_tell(c, factory, queued):
        raise typer.Exit(EXIT_INPUT_FAILED)


def _say_if_unknown(factory: sessionmaker[Session], digest_id: int) -> None:
    """Before a resend of a digest whose outcome is unknown: what it is about to do."""
    from bot.domain import DigestState
    from bot.store.digests import get_digest

    with factory() as session:
        found = get_digest(session, digest_id)
    if found is None or found.state is not DigestState.UNKNOWN:
        return
    when = f" at {found.wire_at:%Y-%m-%d %H:%M} UTC" if found.wire_at is not None else ""
    out.print(
        f"digest #{found.id}'s outcome is unknown: it went on the wire{when} and no answer was seen, so "
        f"{found.subscriber_email} may have it already; sending a copy marked as a resend",
        markup=False,
        soft_wrap=True,
    )


def _resend_target(
    factory: sessionmaker[Session], digest_id: int | None, subscriber: str | None, date_: str | None
) -> int:
    """The digest ``resend`` names: by its id, or a subscriber's scheduled one of a day."""
    from bot.plan import find_scheduled

    if digest_id is not None:
        if digest_id > MAX_ID:
            fail(f"DIGEST_ID: {digest_id} is larger than any digest's id", EXIT_USAGE)
        return digest_id
    if not (subscriber and date_):
        fail("give DIGEST_ID, --subscriber EMAIL --date D, --failed or --unknown", EXIT_USAGE)
    day = parse_date(date_, "--date")
    assert day is not None
    who = find_subscriber(factory, subscriber)
    found = find_scheduled(factory, who.id, day)
    if found is None:
        fail(_no_scheduled_digest(factory, who, day))
    return int(found.id)
