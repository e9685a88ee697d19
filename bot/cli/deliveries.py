"""CLI: what a planning pass and a delivery a command starts did (``run --once``, ``send-now``, ``resend``),
and what became of each digest it queued, a running worker's sends included.  A thin
shell over ``bot.delivery.loop``; prints what happened, never decides it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from bot.cli.context import Context
from bot.cli.output import err, out, progress_bar
from bot.cli.shell import now
from bot.domain.text import plural

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from bot.config import Settings
    from bot.domain import DeliverReport
    from bot.plan.report import PlanReport


def report_delivery(report: DeliverReport) -> bool:
    """Print what a delivery run did; whether any message failed for good (or may have
    gone out unanswered: unknown)."""
    unusual = [(report.unknown, "unknown"), (report.given_back, "given back"), (report.unrecorded, "not recorded")]
    out.print(
        f"sent {report.sent}, retrying {report.retrying}, failed {report.failed}, bounced {report.bounced}, "
        f"cancelled {report.cancelled}" + "".join(f", {words} {count}" for count, words in unusual if count),
        markup=False,
    )
    if report.unknown:
        err.print(
            f"warning: {plural(report.unknown, 'message')} went on the wire with no answer seen (unknown): the "
            "server may have passed them on; 'history --status unknown' lists them, 'resend ID' sends a copy",
            markup=False,
        )
    return bool(report.failed or report.bounced or report.unknown or report.unrecorded)


def deliver_with_progress(c: Context, factory: sessionmaker[Session]) -> DeliverReport:
    """Deliver what is due; Ctrl-C (or SIGTERM) stops it in seconds as it stops the
    daemon, a second one at once (``bot.run.stopping``)."""
    import asyncio

    from bot.delivery.loop import deliver_now, due_count
    from bot.run.stopping import StopSignals

    total = due_count(factory, now())

    async def deliver(advance: Callable[[int], None]) -> DeliverReport:
        stop = asyncio.Event()
        with StopSignals(stop, stop_seconds=c.settings.digest.stop_seconds):
            return await deliver_now(factory, c.parts, clock=now, progress=advance, stop=stop)

    with progress_bar("sending", total) as advance:
        return asyncio.run(deliver(advance))


# How long a command waits for a running worker to settle the digests it queued.
SETTLE_SECONDS = 120.0
# Up to this many queued digests are told one by one; more, as counts by state.
TOLD_ONE_BY_ONE = 10


def deliver_and_tell(c: Context, factory: sessionmaker[Session], queued: list[int]) -> bool:
    """Deliver what is due, then say what became of each queued digest: a running
    worker (the daemon's) may have claimed it first, and its outcome is waited for and
    told, not this command's "sent 0".  Whether any failed for good."""
    import time
    from collections import Counter

    from bot.domain import DigestState
    from bot.store.digests import get_digests

    failed = report_delivery(deliver_with_progress(c, factory))
    on_the_way = (DigestState.QUEUED, DigestState.SENDING)
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        with factory() as session:
            rows = get_digests(session, queued)
        waiting = [row for row in rows if row.state in on_the_way]
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    words = {
        DigestState.SENDING: f"still being sent by a running worker after {SETTLE_SECONDS:g} s ('history' tells)",
        DigestState.QUEUED: "queued: the next delivery sends it",
        DigestState.RETRY_WAIT: "the server said try later: it is sent again",
        DigestState.UNKNOWN: "unknown: it went on the wire and no answer was seen (the reader may have it)",
    }
    if len(rows) <= TOLD_ONE_BY_ONE:
        for row in rows:
            out.print(f"#{row.id} to {row.subscriber_email}: {words.get(row.state, row.state.value)}", markup=False)
    else:
        counts = Counter(row.state.value for row in rows)
        out.print("now: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())), markup=False)
    return failed or any(row.state in (DigestState.FAILED, DigestState.UNKNOWN) for row in rows)


def tell_ranker(planned: PlanReport, settings: Settings) -> None:
    """What the challenger to the built-in order did in this pass: how many readers it
    ranked (it was silent when it answered), and a warning, not a failure, when it failed:
    those readers got their digests in the built-in order."""
    if planned.ranker_ranked:
        who = "the outside ranker" if settings.ranker.url else "the readers' models on embeddings"
        ranked = plural(planned.ranker_ranked, "reader's digest", "readers' digests")
        out.print(f"{who} ordered {ranked}, interleaved with the built-in order", markup=False, soft_wrap=True)
    if planned.ranker_failure is not None:
        skipped = plural(planned.ranker_skipped, "reader")
        err.print(
            f"warning: the outside ranker failed ({planned.ranker_failure}): {skipped} kept the built-in order",
            markup=False,
        )
