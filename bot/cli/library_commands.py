"""CLI commands ``library`` (also ``subscribers library``): add, list, remove a reader's
library (the papers their ranking learns from), their feedback and their threshold
(``library sync`` is in ``zotero_commands``).  Thin shells over ``bot.taste.library_service``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, err, fail, out, print_json_lines
from bot.cli.shell import JsonOption, command_group, ctx_of, find_subscriber, now
from bot.cli.tables import Column, fitted
from bot.domain.text import plural

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from bot.choose.tagging import TagRules

library_app = command_group("A reader's library: the papers their digest is ranked by.")


def train_on_demand(factory: sessionmaker[Session], subscriber_id: int, rules: TagRules | None = None) -> None:
    """Train the subscriber's models now if their library or feedback changed since (the
    daemon would at its next planning pass): what the operator asks about is ranked by
    them.  Without the tag *rules*, the models of a reader of several interests are
    left to the next planning pass.  A few queries when nothing changed."""
    from bot.taste import EXTRA_MISSING, ranking_installed
    from bot.taste.training import refresh_models

    if ranking_installed():
        refresh_models(factory, now(), only=[subscriber_id], rules=rules)
    else:
        err.print(f"note: {EXTRA_MISSING}", markup=False)


@library_app.command("add")
def library_add(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    path: Annotated[Path, typer.Argument(help="BibTeX, RIS, CSL-JSON, or arXiv ids / DOIs one per line.")],
) -> None:
    """Add the papers of a reference manager's export to EMAIL's library.  Each record
    that cannot be read is one warning line; the rest is added (exit 1 if any was bad)."""
    from bot.taste.library import MAX_BYTES, LibraryFileError
    from bot.taste.library_service import import_library

    c = ctx_of(ctx)
    settings, factory = c.settings, c.sessions()
    subscriber = find_subscriber(factory, email)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)  # a bigger file is refused by its size
        result = import_library(factory, subscriber.id, data, now(), most=settings.subscribers.library_max_papers)
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror}")
    except LibraryFileError as exc:
        fail(f"{path}: {exc}")
    for problem in result.problems:
        err.print(f"warning: {path}: {problem}", markup=False)
    if result.over:
        err.print(
            f"warning: {path}: {plural(result.over, 'paper')} not added: a library holds at most "
            f"{settings.subscribers.library_max_papers:,} (subscribers.library_max_papers)",
            markup=False,
        )
    matched = sum(1 for p in result.added if p.entry_id is not None)
    out.print(
        f"{subscriber.email}: added {plural(len(result.added), 'paper')} ({result.format}), "
        f"{matched} of them stored entries; {result.already} already there",
        markup=False,
    )
    if result.added:
        train_on_demand(factory, subscriber.id)  # the next preview is ranked by it
    if result.problems or result.over:
        raise typer.Exit(EXIT_INPUT_FAILED)


@library_app.command("list")
def library_list(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    as_json: JsonOption = False,
) -> None:
    """EMAIL's library: key, title, and the stored entry each paper is."""
    from bot.taste.library_service import library

    factory = ctx_of(ctx).sessions()
    papers = library(factory, find_subscriber(factory, email).id)
    if as_json:
        print_json_lines([{"key": p.key, "title": p.title, "entry": p.entry_id, "source": p.source} for p in papers])
        return
    columns = [
        Column("key", whole=True),
        Column("title"),
        Column("entry", whole=True, drop=2),
        Column("source", drop=1),
    ]
    rows = [[p.key, p.title, f"#{p.entry_id}" if p.entry_id else "not stored", p.source] for p in papers]
    out.print(fitted(columns, rows, width=out.width, title=f"Library ({len(papers)})"))


@library_app.command("remove")
def library_remove(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    keys: Annotated[list[str], typer.Argument(help="Keys as 'library list' shows them.")],
) -> None:
    """Remove papers from EMAIL's library (exit 1 when a key is not in it)."""
    from bot.taste.library_service import remove_from_library
    from bot.taste.training import refresh_models

    factory = ctx_of(ctx).sessions()
    subscriber_id = find_subscriber(factory, email).id
    removed = remove_from_library(factory, subscriber_id, keys)
    if removed:
        refresh_models(factory, now(), only=[subscriber_id])
    out.print(f"removed {plural(removed, 'paper')}", markup=False)
    if removed < len(set(keys)):
        fail(f"{len(set(keys)) - removed} of the keys given are not in the library")


@library_app.command("feedback")
def library_feedback(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    as_json: JsonOption = False,
) -> None:
    """What EMAIL said of entries of their digests: "more like this" (learned as library
    papers) and "less like this" (learned as papers they do not want), and the interest
    each was shown under in a digest of several (whose model learns it)."""
    from bot.taste.library_service import feedback

    factory = ctx_of(ctx).sessions()
    rows = feedback(factory, find_subscriber(factory, email).id)
    if as_json:
        print_json_lines(
            [{"key": r.key, "title": r.title, "verdict": r.verdict, "at": r.at, "interest": r.section} for r in rows]
        )
        return
    columns = [
        Column("at", whole=True),
        Column("verdict", whole=True),
        Column("key", whole=True, drop=1),
        Column("title"),
    ]
    shown = [
        [
            f"{r.at:%Y-%m-%d %H:%M}",
            f"{r.verdict} like this" + (f" (in {r.section})" if r.section else ""),
            r.key,
            r.title,
        ]
        for r in rows
    ]
    out.print(fitted(columns, shown, width=out.width, title=f"Feedback ({len(rows)})"))


@library_app.command("threshold")
def library_threshold(
    ctx: typer.Context,
    email: Annotated[str, typer.Argument(help="The subscriber's address.")],
    value: Annotated[
        float | None,
        typer.Argument(help="The taste score above which an entry is 'liked' (default 0.1)."),
    ] = None,
) -> None:
    """Show or set EMAIL's threshold: the filter atom `liked` matches the entries their
    model scores above it (0 is a typical entry of the store, 1 a typical paper of their
    library; higher is pickier)."""
    from bot.taste.library_service import set_taste_threshold

    factory = ctx_of(ctx).sessions()
    subscriber = find_subscriber(factory, email)
    if value is not None:
        try:
            set_taste_threshold(factory, subscriber.id, value, now())
        except ValueError as exc:
            fail(f"threshold: {exc}", EXIT_USAGE)
        subscriber = find_subscriber(factory, email)
    out.print(f"{subscriber.email}: liked above a taste score of {subscriber.taste_threshold:.2f}", markup=False)


def print_library(ctx: typer.Context, email: str) -> None:
    """``subscribers export --library EMAIL``: their library and feedback as CSL-JSON
    (``library add`` reads it back; "less like this" items are left out then)."""
    from bot.taste.library import csl_json
    from bot.taste.library_service import feedback, library

    factory = ctx_of(ctx).sessions()
    subscriber_id = find_subscriber(factory, email).id
    sys.stdout.write(csl_json(library(factory, subscriber_id), feedback(factory, subscriber_id)))
