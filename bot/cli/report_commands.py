"""CLI commands that report what was sent: ``history`` and ``stats``.  Thin shells over
the store's reports (``bot.reports``, ``bot.store.digests``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.context import Context
from bot.cli.digest_views import digest_json, digest_story, digest_table
from bot.cli.output import EXIT_USAGE, JsonObject, fail, jsonable, out, print_json_lines
from bot.cli.returned_mail_commands import returns_table
from bot.cli.shell import MAX_ROWS, JsonOption, ctx_of, find_subscriber, now
from bot.cli.tables import Column, fitted
from bot.domain import DigestState, Removed, ReturnKind
from bot.domain.text import plural
from bot.files import write_whole
from bot.reports.list_picture import DEFAULT_DAYS, MAX_DAYS

if TYPE_CHECKING:
    from datetime import datetime

    from sqlalchemy.orm import Session

    from bot.config.services import LlmConfig

UNKNOWN_WORDS = (
    "unknown: went on the wire and no answer was seen (a connection lost or a wait run out after the "
    "message, a worker stopped meanwhile): the reader may have it. Never sent again by itself; "
    "'resend ID' (or 'resend --unknown') sends a copy."
)
DIGEST_COLUMNS = ("planned", "sent", "failed", "unknown", "pending", "empty", "resent")
RETURN_COLUMNS = ("bounced", "hard", "soft", "complaints")


def history(
    ctx: typer.Context,
    email: Annotated[str | None, typer.Argument(help="Only this subscriber.")] = None,
    status: Annotated[DigestState | None, typer.Option("--status", help="Only digests in this state.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, max=MAX_ROWS, help="At most this many (newest first).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Digests, newest first: who, which day, state, entries, attempts, last error; for
    one subscriber, the bounces and complaints read from the inbox too."""
    from bot.store.digests import list_digests
    from bot.store.retention import removed
    from bot.store.returns import returns_of

    c = ctx_of(ctx)
    factory = c.sessions()
    subscriber_id = find_subscriber(factory, email).id if email else None
    with factory() as session:
        digests = list_digests(session, subscriber_id=subscriber_id, state=status, limit=limit)
        returned = returns_of(session, subscriber_id) if subscriber_id is not None else []
        gone = removed(session)
    at = now()
    stories = [digest_story(d, c.settings.schedule.day_closes_hour, at) for d in digests]
    if as_json:
        print_json_lines([digest_json(d, story) for d, story in zip(digests, stories, strict=True)])
        return
    out.print(digest_table(digests, f"Digests ({len(digests)})", stories, width=out.width))
    if any(d.state is DigestState.UNKNOWN for d in digests):
        out.print(UNKNOWN_WORDS, markup=False)
    say_removed(gone, c.settings.database.keep_days)
    if returned:
        out.print(returns_table(returned))


def say_removed(gone: Removed | None, keep_days: int) -> None:
    """One line: which digests retention removed, when it removed any."""
    if gone is not None:
        out.print(
            f"Digests planned before {gone.before:%Y-%m-%d %H:%M} UTC are no longer kept "
            f"(database.keep_days = {keep_days}): {plural(gone.digests, 'digest')} removed.",
            markup=False,
        )


def stats(
    ctx: typer.Context,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", help="Write a picture of the list here instead: one HTML file of charts.", metavar="FILE"
        ),
    ] = None,
    span: Annotated[
        int, typer.Option("--days", help="With --html: how many days, ending today (UTC).", min=7, max=MAX_DAYS)
    ] = DEFAULT_DAYS,
    as_json: JsonOption = False,
) -> None:
    """Per local day: digests planned, sent, failed, bounced (and the rest).  A failed
    digest whose resend was delivered counts as sent; 'resent' counts delivered resends.
    Hard and soft bounces and complaints read from the inbox count by the day they were read (UTC).
    --html FILE: charts of the last --days days (subscribers by status, digests, unsubscribes
    and complaints, ratings, entries by source) in one self-contained page."""
    c = ctx_of(ctx)
    if html is None:
        _stats_table(c, as_json)
    elif as_json:
        fail("--html writes a page and --json prints lines: give one of them", EXIT_USAGE)
    else:
        _write_picture(c, html, span)


def _stats_table(c: Context, as_json: bool) -> None:
    from bot.store.digests import bounced_by_day, stats_by_day
    from bot.store.facts import RANKER_FAILURE_FACT, fact
    from bot.store.retention import removed
    from bot.store.returns import returns_by_day

    with c.sessions()() as session:
        days = stats_by_day(session)
        bounced = bounced_by_day(session)
        returned = returns_by_day(session)
        gone = removed(session)
        ranker_failed = fact(session, RANKER_FAILURE_FACT) if c.settings.ranker.url else None
        model = _model_lines(session, c.settings.llm, now()) if c.settings.llm.enabled else []
    digest_days = dict(days)
    rows: list[JsonObject] = []
    for day in sorted(digest_days.keys() | returned.keys(), reverse=True):
        states = digest_days.get(day, {})
        mail = returned.get(day, {})
        planned = sum(n for s, n in states.items() if s not in ("empty", "resent"))
        rows.append(
            {
                "day": day,
                "planned": planned,
                "sent": states.get("sent", 0),
                "failed": states.get("failed", 0),
                "unknown": states.get("unknown", 0),
                "bounced": bounced.get(day, 0),
                "pending": sum(states.get(s, 0) for s in ("queued", "sending", "retry_wait")),
                "empty": states.get("empty", 0),
                "resent": states.get("resent", 0),
                "hard": mail.get(ReturnKind.HARD.value, 0),
                "soft": mail.get(ReturnKind.SOFT.value, 0),
                "complaints": mail.get(ReturnKind.COMPLAINT.value, 0),
            }
        )
    if as_json:
        print_json_lines(rows)
        return
    _print_stats(rows)
    if any(r["unknown"] for r in rows):
        out.print(UNKNOWN_WORDS, markup=False)
    say_removed(gone, c.settings.database.keep_days)
    if ranker_failed:
        out.print(
            f"The outside ranker last failed {ranker_failed}; those readers kept the built-in order.", markup=False
        )
    for line in model:
        out.print(line, markup=False)


def _print_stats(rows: list[JsonObject]) -> None:
    """Two tables, each within 80 columns: the same columns on every run (one table of
    twelve hid different ones at the same width as the figures changed)."""
    for title, names in (("Digests per day", DIGEST_COLUMNS), ("Returned mail per day", RETURN_COLUMNS)):
        columns = [Column("day", whole=True), *(Column(name, whole=True) for name in names)]
        shown = [[str(jsonable(r["day"])), *(str(r[name]) for name in names)] for r in rows]
        out.print(fitted(columns, shown, width=out.width, title=title))


def _model_lines(session: Session, llm: LlmConfig, at: datetime) -> list[str]:
    """What the language model was asked today, and when its requests last failed."""
    from bot.store.facts import EMBEDDING_FAILURE_FACT, TLDR_FAILURE_FACT, fact
    from bot.store.tldrs import model_paused_until, spent_on

    requests, tokens = spent_on(session, at.date())
    budget = f" of {llm.requests_per_day:,} a day" if llm.requests_per_day else ""
    named = (("chat", llm.chat_model), ("embeddings", llm.embedding_model))
    models = ", ".join(f"{role}: {model}" for role, model in named if model)
    lines = [f"Language model ({models}): {plural(requests, 'request')}{budget} today (UTC), {tokens:,} tokens."]
    paused = model_paused_until(session, llm.base_url)
    later = f"after {paused:%Y-%m-%d %H:%M} UTC" if paused is not None and paused > at else "at the next pass"
    if paused is not None and paused > at:
        lines.append(f"The model asked for a pause (429): nothing is sent to it before {paused:%Y-%m-%d %H:%M} UTC.")
    for name, words, model in (
        (TLDR_FAILURE_FACT, "TL;DR", llm.chat_model),
        (EMBEDDING_FAILURE_FACT, "Embedding", llm.embedding_model),
    ):
        failed = fact(session, name)
        if failed and model:  # a model no longer configured is not asked again: its old failure says nothing
            lines.append(f"{words} requests last failed {failed}; asked again {later}.")
    return lines


def _write_picture(c: Context, file: Path, days: int) -> None:
    from bot.reports.list_picture import gather, page

    if file.is_dir():
        fail(f"{file}: is a folder; name the file to write", EXIT_USAGE)
    if not file.parent.is_dir():
        fail(f"{file.parent}: no such folder", EXIT_USAGE)
    at = now()
    with c.sessions()() as session:
        picture = gather(session, at.date(), days=days, keep_days=c.settings.database.keep_days, now=at)
    data = page(picture).encode("utf-8")
    try:
        write_whole(file, data)
    except OSError as exc:
        fail(f"{file}: cannot write: {exc.strerror}")
    out.print(f"wrote {file} ({len(data):,} bytes): open it in a browser", markup=False)
