"""CLI commands ``tags``: tag counts, what a filter matches and why, re-applying tag
rules.  Never changes a subscriber or sends anything."""

from __future__ import annotations

from typing import Annotated

import typer

from bot.cli.entry_lists import print_candidates
from bot.cli.library_commands import train_on_demand
from bot.cli.output import EXIT_USAGE, err, fail, out, print_json_lines, progress_bar
from bot.cli.shell import MAX_ROWS, JsonOption, command_group, ctx_of, find_subscriber
from bot.cli.tables import Column, fitted
from bot.domain.text import plural

tags_app = command_group("Tags and tag rules: counts, test a filter, re-apply rules.")


@tags_app.command("list")
def tags_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every tag with its number of entries (per origin) and its rule's description."""
    from bot.store.entry_reads import tag_counts

    c = ctx_of(ctx)
    descriptions = {r.name: r.description for r in c.rules.rules}
    with c.sessions()() as session:
        counts = tag_counts(session)
    rule_only = [r for r in c.rules.rules if r.name not in {label.casefold() for label, _, _ in counts}]
    rows = [(label, total, origins, descriptions.get(label.casefold(), "")) for label, total, origins in counts]
    rows += [(r.label, 0, {}, r.description) for r in rule_only]
    if as_json:
        print_json_lines(
            [
                {"tag": t, "entries": n, "by_origin": o, "rule": t.casefold() in descriptions, "description": d}
                for t, n, o, d in rows
            ]
        )
        return
    columns = [
        Column("tag", whole=True),
        Column("entries", whole=True, justify="right"),
        Column("header", whole=True, drop=3, justify="right"),
        Column("category", whole=True, drop=2, justify="right"),
        Column("rule", whole=True, drop=1, justify="right"),
        Column("description"),
    ]
    shown = [
        [t, str(n), str(o.get("header", "")), str(o.get("category", "")), str(o.get("rule", "")), d]
        for t, n, o, d in rows
    ]
    out.print(fitted(columns, shown, width=out.width, title=f"Tags ({len(rows)})"))


@tags_app.command("test")
def tags_test(
    ctx: typer.Context,
    expression: Annotated[str, typer.Argument(help="A filter expression, e.g. 'gpu and not snn'.")],
    limit: Annotated[int | None, typer.Option(min=1, max=MAX_ROWS, help="At most this many.")] = None,
    subscriber_email: Annotated[
        str | None,
        typer.Option("--subscriber", help="Rank and score by this subscriber's model ('liked' is theirs)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The stored entries a filter matches, best first, with why; with --subscriber,
    in the order and with the scores of that subscriber's model."""
    from bot.choose.filter_terms import Liked, atoms, to_text
    from bot.choose.filters import FilterError, parse_filter
    from bot.choose.select import every_entry, matching
    from bot.choose.vocabulary import idle_atoms_note, unknown_tags
    from bot.store.entry_reads import tag_names
    from bot.taste.explain import reader_taste, scored

    c = ctx_of(ctx)
    try:
        expr = parse_filter(expression)
    except FilterError as exc:
        fail(str(exc), EXIT_USAGE)
        return
    factory = c.sessions()
    subscriber = find_subscriber(factory, subscriber_email) if subscriber_email else None
    if subscriber is not None:
        train_on_demand(factory, subscriber.id, c.rules)
    with factory() as session:
        entries = every_entry(session)
        taste = reader_taste(session, subscriber, None, entries) if subscriber is not None else None
        liked = taste.liked(subscriber.taste_threshold) if taste is not None and subscriber is not None else frozenset()
        found, idle = matching(session, expr, c.rules, entries=entries, liked=liked)
        known = tag_names(session) | {rule.name for rule in c.rules.rules}
    shown = scored(taste, found)[:limit] if limit is not None else scored(taste, found)
    print_candidates(shown, f"{to_text(expr)}: {plural(len(found), 'entry', 'entries')}", as_json)
    if as_json:
        return
    if idle:
        err.print(idle_atoms_note(idle, unknown_tags(expr, known)), markup=False)
    if Liked() in atoms(expr) and taste is None:
        whose = f"{subscriber.email} has no model yet" if subscriber else "give --subscriber EMAIL"
        err.print(
            f"'liked' matches nothing here: {whose} (a model needs 2 library papers or 'more like this')",
            markup=False,
        )


@tags_app.command("apply")
def tags_apply(ctx: typer.Context) -> None:
    """Recompute rule tags of every stored entry from the current tags file."""
    from bot.ingest.storing import retag_all
    from bot.store.entry_reads import count_entries

    c = ctx_of(ctx)
    factory = c.sessions()
    with factory() as session:
        total = count_entries(session)
    with progress_bar("re-tagging", total) as advance:
        done = retag_all(factory, c.rules, progress=advance)
    out.print(
        f"re-tagged {plural(done, 'entry', 'entries')} with {plural(len(c.rules), 'rule')} "
        f"from {c.settings.paths.tags_file}",
        markup=False,
    )
