"""CLI commands that preview, plan, send and report digests: ``preview``, ``run``,
``scheduler``, ``worker``, ``serve``, ``send-now``, ``resend``, ``demo``.  Thin shells over
the planner, the delivery loop and the daemon."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bot.cli.candidates import print_candidates
from bot.cli.deliveries import deliver_and_tell, deliver_with_progress, report_delivery
from bot.cli.library_commands import train_on_demand
from bot.cli.shell import (
    EXIT_INPUT_FAILED,
    EXIT_USAGE,
    MAX_ID,
    Context,
    JsonOption,
    app,
    ctx_of,
    err,
    fail,
    find_subscriber,
    now,
    out,
    parse_date,
    plural,
    print_json_lines,
    report_ingest,
)
from bot.cli.tables import Column, fitted
from bot.domain import SourceStatus, SubscriberStatus
from bot.files import write_whole

if TYPE_CHECKING:
    from bot.plan.report import PlanReport


@app.command("preview")
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
        c.signing_key()  # the message carries signed links
        _preview_message(c, factory, subscriber, day, eml=eml, html=html, show=show)
        return
    _preview_entries(c, factory, subscriber, day, as_json)


def _preview_entries(c: Context, factory: Any, subscriber: Any, day: Any, as_json: bool) -> None:
    from bot.choose.select import SelectionCache, effective_start, local_send_time, select_for
    from bot.plan.retention import kept_since
    from bot.plan.sections import Sectioner
    from bot.store.ledger import claimed_entry_ids
    from bot.taste.explain import liked_for, reader_taste, scored

    as_of = local_send_time(subscriber, day) if day else now()
    cache = SelectionCache()
    with factory() as session:
        start = effective_start(subscriber, kept_since(c.settings, now()))
        taste = reader_taste(session, subscriber, start, cache.entries(session, start, as_of))
        liked = liked_for(subscriber.filter, taste, subscriber.taste_threshold)
        found = select_for(
            session,
            subscriber,
            c.rules,
            as_of=as_of,
            start=start,
            exclude=claimed_entry_ids(session, subscriber.id),
            cache=cache,
            liked=liked,
        )
    label = (
        f"{subscriber.email} ({subscriber.status.value}) as of {as_of:%Y-%m-%d %H:%M} UTC, filter {subscriber.filter}"
    )
    placing = Sectioner(cache, c.rules).interest_of(subscriber.filter, liked)
    print_candidates(scored(taste, found, placing), f"{label}: {plural(len(found), 'entry', 'entries')}", as_json)
    if taste is not None and not as_json:
        out.print(
            f"ranked by their model: score + 3 x taste; liked: taste above {subscriber.taste_threshold:.2f}",
            markup=False,
        )
    if not found and not as_json:
        from bot.plan.cadence import mails
        from bot.plan.next_digest import outlook, outlook_note

        with factory() as session:
            seen = outlook(session, subscriber, c.rules, as_of=as_of)
        out.print(outlook_note(seen, to_reader=False, mailed=mails(subscriber.cadence)), markup=False)
    if not day and not as_json:
        from bot.plan.next_digest import when_note

        out.print(when_note(factory, c.settings, subscriber, as_of), markup=False)


def _preview_message(
    c: Context, factory: Any, subscriber: Any, day: Any, *, eml: Path | None, html: Path | None, show: bool
) -> None:
    import email
    import tempfile
    import webbrowser
    from email.policy import default

    from bot.plan.next_digest import next_day
    from bot.preview import next_message

    if subscriber.status is not SubscriberStatus.ACTIVE:
        fail(f"{subscriber.email} is {subscriber.status.value}: they get no digest")
    at = now()
    if not day:
        with factory() as session:
            day = next_day(session, subscriber, at)
    try:
        found = next_message(factory, c.settings, c.rules, subscriber, day=day, now=at)
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


def _preview_day(c: Context, day: Any, as_json: bool) -> None:
    from bot.plan.next_digest import day_table
    from bot.store.subscribers import list_subscribers

    factory = c.sessions()
    day = day or now().date()
    with factory() as session:
        everyone = list_subscribers(session, status=SubscriberStatus.ACTIVE)
    lines = day_table(factory, c.settings, c.rules, everyone, day, now())
    if as_json:
        print_json_lines(
            [{"email": x.email, "send_at": x.send_at, "entries": x.entries, "held_back": x.held_back} for x in lines]
        )
        return
    columns = [
        Column("subscriber", whole=True),
        Column("sends at (UTC)", whole=True),
        Column("entries", whole=True, justify="right"),
        Column("held back", whole=True, drop=1, justify="right"),
    ]
    rows = [[x.email, f"{x.send_at:%Y-%m-%d %H:%M}", str(x.entries), str(x.held_back)] for x in lines]
    out.print(fitted(columns, rows, width=out.width, title=f"Digests of {day}"))
    going = sum(1 for x in lines if x.entries)
    out.print(f"{plural(going, 'digest')} with {sum(x.entries for x in lines)} entries in all", markup=False)


@app.command("run")
def run_command(
    ctx: typer.Context,
    once: Annotated[bool, typer.Option("--once", help="One full cycle (watch, plan, deliver), then exit.")] = False,
    all_due: Annotated[
        bool, typer.Option("--all-due", help="With --once: treat every active subscriber as due now.")
    ] = False,
) -> None:
    """The daemon, both roles in one process (the single-machine default): watch the
    dump folder and feeds, plan digests at each subscriber's local send time, deliver
    them.  SIGTERM/Ctrl-C: finish in-flight sends, exit 0."""

    from bot.ingest.watcher import fetch_feeds, scan_folder
    from bot.plan import plan
    from bot.store.engine import refresh_statistics

    c = ctx_of(ctx)
    if all_due and not once:
        fail("--all-due only goes with --once", EXIT_USAGE)
    c.check_watch_inputs()
    factory = c.sessions()
    if not once:
        _daemon(c, factory, plan_jobs=True, deliver_jobs=True)
        return
    c.signing_key()
    results = scan_folder(
        factory,
        c.dump_dir,
        quiet_seconds=c.settings.watch.quiet_seconds,
        rules=c.rules,
        max_bytes=c.settings.watch.max_file_bytes,
    )
    if c.settings.feeds.urls:
        results += fetch_feeds(factory, c.settings, rules=c.rules)
    report_ingest(results, False)
    refresh_statistics(c.engine)
    planned = plan(factory, c.settings, c.rules, now=now(), all_due=all_due)
    out.print(
        f"planned {plural(len(planned.planned), 'digest')} "
        f"({planned.empty} with nothing new, {planned.not_due} not due yet)"
    )
    _tell_ranker_failure(planned)
    undelivered = report_delivery(deliver_with_progress(c, factory))
    if undelivered or any(r.status is SourceStatus.FAILED for r in results):
        raise typer.Exit(EXIT_INPUT_FAILED)


# What an http:// public URL costs (RFC 8058 asks for https), said when a process starts.
PLAIN_HTTP = (
    "web.public_url is http://, so digests carry no List-Unsubscribe-Post: mail providers show no one-click "
    "unsubscribe button (RFC 8058 needs https)"
)


def _daemon(c: Context, factory: Any, *, plan_jobs: bool, deliver_jobs: bool) -> None:
    import asyncio

    from bot.run.arenas import share_one_arena
    from bot.run.roles import RoleTaken
    from bot.run.scheduler import Daemon

    share_one_arena()  # before the daemon's threads start
    c.log_as_daemon()
    c.signing_key()  # the key the links already mailed were signed with, or a refusal
    if deliver_jobs and c.settings.web.public_url.startswith("http://"):
        import logging

        logging.getLogger("bot.run").warning("%s", PLAIN_HTTP)
    try:
        daemon = Daemon(factory, c.settings, c.rules, engine=c.engine, plan_jobs=plan_jobs, deliver_jobs=deliver_jobs)
    except RoleTaken as exc:
        fail(str(exc))
        return
    except OSError as exc:  # the metrics port
        where = f"{c.settings.metrics.listen_host}:{c.settings.metrics.listen_port}"
        fail(f"metrics.listen_port: cannot listen on {where}: {exc.strerror or exc}", EXIT_USAGE)
        return
    asyncio.run(daemon.run())


@app.command("scheduler")
def scheduler_command(ctx: typer.Context) -> None:
    """The scheduler role only: watch dumps and feeds, plan digests.  Several may run;
    one is elected (PostgreSQL advisory lock), the others stand by and take over."""
    c = ctx_of(ctx)
    c.check_watch_inputs()
    _daemon(c, c.sessions(), plan_jobs=True, deliver_jobs=False)


@app.command("worker")
def worker_command(ctx: typer.Context) -> None:
    """The worker role only: deliver due digests.  On PostgreSQL run as many as you
    like (they claim disjoint batches); on SQLite exactly one."""
    c = ctx_of(ctx)
    _daemon(c, c.sessions(), plan_jobs=False, deliver_jobs=True)


@app.command("serve")
def serve_command(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", help="Listen address (default: web.listen_host).")] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=1, max=65535, help="Port (default: web.listen_port).")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Processes serving the port.")] = 1,
) -> None:
    """The subscriber endpoint: one-click unsubscribe (RFC 8058) and the manage page
    behind the links in every digest.  Put it behind HTTPS at web.public_url."""
    import os

    from bot.web import serve

    c = ctx_of(ctx)
    c.log_as_daemon()
    web = c.settings.web
    if not web.public_url:
        err.print("note: web.public_url is empty, so digests carry only mailto: unsubscribe links, not links here")
    elif web.public_url.startswith("http://"):
        err.print(f"note: {PLAIN_HTTP}", markup=False)
    factory = c.sessions()  # migrates SQLite (or refuses an old schema) before any worker starts
    c.signing_key()  # the key the links already mailed were signed with, or a refusal
    if c.config_path is not None:
        os.environ["DIGESTBOT_CONFIG"] = str(c.config_path.resolve())  # what the worker processes load
    serve(c.settings, factory, host=host or web.listen_host, port=port or web.listen_port, workers=workers)


@app.command("send-now")
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
    c.signing_key()
    chosen, refused = sendable([find_subscriber(factory, e) for e in emails]) if emails else (None, [])
    for line in refused:
        err.print(f"error: {line}", markup=False)
    if chosen == []:
        raise typer.Exit(EXIT_INPUT_FAILED)
    planned = plan(factory, c.settings, c.rules, now=now(), subscribers=chosen, kind=DigestKind.MANUAL)
    nothing = f"; {plural(planned.empty, 'subscriber')} had nothing new" if planned.empty else ""
    out.print(f"queued {plural(len(planned.planned), 'digest')}{nothing}", markup=False)
    _tell_ranker_failure(planned)
    if deliver_and_tell(c, factory, list(planned.planned)) or refused:
        raise typer.Exit(EXIT_INPUT_FAILED)


def _tell_ranker_failure(planned: PlanReport) -> None:
    """A warning, not a failure: the readers got their digests in the built-in order."""
    if planned.ranker_failure is not None:
        skipped = plural(planned.ranker_skipped, "reader")
        err.print(
            f"warning: the outside ranker failed ({planned.ranker_failure}): {skipped} kept the built-in order",
            markup=False,
        )


def _no_scheduled_digest(factory: Any, subscriber: Any, day: Any) -> str:
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


@app.command("resend")
def resend_command(
    ctx: typer.Context,
    digest_id: Annotated[int | None, typer.Argument(min=1, help="The digest to send again.")] = None,
    subscriber: Annotated[
        str | None, typer.Option("--subscriber", help="With --date: that subscriber's scheduled digest.")
    ] = None,
    date_: Annotated[str | None, typer.Option("--date", help="The local day of the digest.")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Resend every failed digest.")] = False,
) -> None:
    """Send a digest again: same entries and summaries, marked as a resend; the
    ledger does not change."""
    from bot.plan import DigestNotFound, ResendPending, resend, resend_failed
    from bot.plan.resend import ReaderNotActive

    c = ctx_of(ctx)
    factory = c.sessions()
    c.signing_key()
    if failed:
        queued = resend_failed(factory, c.settings, now=now())
        out.print(f"queued {plural(len(queued), 'resend')}: {', '.join(f'#{q}' for q in queued) or 'none'}")
        if deliver_and_tell(c, factory, queued):
            raise typer.Exit(EXIT_INPUT_FAILED)
        return
    targets = [_resend_target(factory, digest_id, subscriber, date_)]
    try:
        queued = [resend(factory, c.settings, t, now=now()) for t in targets]
    except (DigestNotFound, ResendPending, ReaderNotActive) as exc:
        fail(str(exc))
        return
    out.print(f"queued {plural(len(queued), 'resend')}: {', '.join(f'#{q}' for q in queued) or 'none'}")
    if deliver_and_tell(c, factory, queued):
        raise typer.Exit(EXIT_INPUT_FAILED)


def _resend_target(factory: Any, digest_id: int | None, subscriber: str | None, date_: str | None) -> int:
    """The digest ``resend`` names: by its id, or a subscriber's scheduled one of a day."""
    from bot.plan import find_scheduled

    if digest_id is not None:
        if digest_id > MAX_ID:
            fail(f"DIGEST_ID: {digest_id} is larger than any digest's id", EXIT_USAGE)
        return digest_id
    if not (subscriber and date_):
        fail("give DIGEST_ID, --subscriber EMAIL --date D, or --failed", EXIT_USAGE)
    day = parse_date(date_, "--date")
    assert day is not None
    who = find_subscriber(factory, subscriber)
    found = find_scheduled(factory, who.id, day)
    if found is None:
        fail(_no_scheduled_digest(factory, who, day))
    return int(found.id)


@app.command("demo")
def demo(ctx: typer.Context) -> None:
    """Replay seeds/ one day at a time into a local SMTP sink: var/inbox/*.eml + index.html."""
    from bot.tools.demo import DEMO_LIBRARY, run_demo

    c = ctx_of(ctx)
    csv_path = Path("config/subscribers.example.csv")
    if not csv_path.is_file():
        fail(f"{csv_path}: not found (run the demo from the project folder)", EXIT_USAGE)
    reader, library_path = DEMO_LIBRARY
    library = {reader: Path(library_path).read_bytes()} if Path(library_path).is_file() else {}
    rows, inbox = run_demo(c.settings, c.rules, subscribers_csv=csv_path, libraries=library)
    columns = [
        Column("day", whole=True, justify="right"),
        Column("dump", drop=1),
        Column("subscriber", whole=True),
        Column("entries", whole=True, justify="right"),
        Column("status", whole=True),
    ]
    shown = [[str(r.day), r.dump, r.subscriber, str(r.entries), r.status] for r in rows]
    out.print(fitted(columns, shown, width=out.width, title="Seed replay: one digest per subscriber and day"))
    count = len(list(inbox.glob("*.eml")))
    out.print(f"{plural(count, 'message')} in {inbox}/ (open {inbox / 'index.html'} in a browser)", markup=False)
    from bot.config import site_url

    state = "on" if c.settings.web.signup else "off until web.signup = true"
    out.print(f"sign-up page: {site_url(c.settings.web)}/subscribe ('digestbot serve'; {state})", markup=False)
