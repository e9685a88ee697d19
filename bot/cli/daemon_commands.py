"""CLI: the long-running processes and the one-shot cycle: ``run``, ``scheduler``,
``worker``, ``serve``, and ``demo``.  Thin shells over the daemon (``bot.run``), the
endpoint (``bot.web``) and the demo (``bot.tools.demo``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.context import Context
from bot.cli.deliveries import deliver_with_progress, report_delivery, tell_ranker
from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, err, fail, out, report_ingest
from bot.cli.shell import ctx_of, now
from bot.cli.tables import Column, fitted
from bot.domain import SourceStatus
from bot.domain.text import plural

if TYPE_CHECKING:
    pass


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
    if not once:
        _daemon(c, plan_jobs=True, deliver_jobs=True)
        return
    factory = c.sessions()
    c.link_key()
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
    tell_ranker(planned, c.settings)
    undelivered = report_delivery(deliver_with_progress(c, factory))
    if undelivered or any(r.status is SourceStatus.FAILED for r in results):
        raise typer.Exit(EXIT_INPUT_FAILED)


# What an http:// public URL costs (RFC 8058 asks for https), said when a process starts.
PLAIN_HTTP = (
    "web.public_url is http://, so digests carry no List-Unsubscribe-Post: mail providers show no one-click "
    "unsubscribe button (RFC 8058 needs https)"
)


def _daemon(c: Context, *, plan_jobs: bool, deliver_jobs: bool) -> None:
    """The daemon of *c*'s roles; a stop asked while it starts exits 0 at once."""
    import logging

    from bot.run.stopping import StoppedBeforeStart, stop_while_starting

    try:
        with stop_while_starting():
            _start_daemon(c, plan_jobs=plan_jobs, deliver_jobs=deliver_jobs)
    except StoppedBeforeStart as exc:
        logging.getLogger("bot.run.scheduler").warning("stop asked (%s) while starting: stopped, nothing claimed", exc)


def _start_daemon(c: Context, *, plan_jobs: bool, deliver_jobs: bool) -> None:
    import asyncio

    from bot.run.malloc_arenas import share_one_arena
    from bot.run.roles import RoleTaken
    from bot.run.scheduler import Daemon

    c.log_as_daemon()
    factory = c.sessions()
    share_one_arena()  # before the daemon's threads start
    c.link_key()  # the key the links already mailed were signed with, or a refusal
    if deliver_jobs and c.settings.web.public_url.startswith("http://"):
        import logging

        logging.getLogger("bot.run").warning("%s", PLAIN_HTTP)
    try:
        daemon = Daemon(factory, c.parts, engine=c.engine, plan_jobs=plan_jobs, deliver_jobs=deliver_jobs)
    except RoleTaken as exc:
        fail(str(exc))
        return
    except OSError as exc:  # the metrics port
        where = f"{c.settings.metrics.listen_host}:{c.settings.metrics.listen_port}"
        fail(f"metrics.listen_port: cannot listen on {where}: {exc.strerror or exc}", EXIT_USAGE)
        return
    asyncio.run(daemon.run())


def scheduler_command(ctx: typer.Context) -> None:
    """The scheduler role only: watch dumps and feeds, plan digests.  Several may run;
    one is elected (PostgreSQL advisory lock), the others stand by and take over."""
    c = ctx_of(ctx)
    c.check_watch_inputs()
    _daemon(c, plan_jobs=True, deliver_jobs=False)


def worker_command(ctx: typer.Context) -> None:
    """The worker role only: deliver due digests.  On PostgreSQL run as many as you
    like (they claim disjoint batches); on SQLite exactly one."""
    c = ctx_of(ctx)
    _daemon(c, plan_jobs=False, deliver_jobs=True)


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
    c.link_key()  # the key the links already mailed were signed with, or a refusal
    if c.config_path is not None:
        os.environ["DIGESTBOT_CONFIG"] = str(c.config_path.resolve())  # what the worker processes load
    from bot.web.server import CannotListen

    try:
        serve(c.parts, factory, host=host or web.listen_host, port=port or web.listen_port, workers=workers)
    except CannotListen as exc:
        fail(f"web.listen_port: {exc} (--port or web.listen_port chooses another)", EXIT_USAGE)


def demo(ctx: typer.Context) -> None:
    """Replay seeds/ one day at a time into a local SMTP sink: var/inbox/*.eml + index.html."""
    from bot.tools.demo import DEMO_LIBRARY, demo_serve_line, run_demo

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
    out.print(demo_serve_line(c.settings), markup=False)
    from bot.config import site_url
    from bot.domain.routes import SIGNUP

    state = "on" if c.settings.web.signup else "off until web.signup = true"
    out.print(f"sign-up page: {SIGNUP.url(site_url(c.settings.web))} ('digestbot serve'; {state})", markup=False)
