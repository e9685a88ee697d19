"""CLI command ``rankers report``: each outside ranker (and the readers' embeddings
models) judged by the readers' ratings of interleaved digests.  A thin shell over
``bot.rankers.interleave``."""

from __future__ import annotations

from typing import Annotated

import typer

from bot.cli.output import out, print_json_lines
from bot.cli.shell import JsonOption, command_group, ctx_of, now
from bot.cli.tables import Column, fitted
from bot.domain.text import plural

rankers_app = command_group(
    "Outside rankers (ranker.url) and the embeddings, judged by the readers' ratings of interleaved digests."
)


@rankers_app.command("report")
def rankers_report(
    ctx: typer.Context,
    days: Annotated[
        int, typer.Option("--days", help="The window: digests sent in the last DAYS days.", min=1, max=3650)
    ] = 28,
    as_json: JsonOption = False,
) -> None:
    """Per outside ranker (and 'embeddings', the readers' models on llm.embedding_model's
    vectors): the interleaved digests sent in the window, the digests its entries earned
    more "More like this" than the built-in ranking's (wins), fewer (losses) or as many
    (ties), and the two-sided sign test's p-value (ties left out): below 0.05, the
    difference is unlikely to be chance."""
    from datetime import timedelta

    from bot.rankers.interleave import tallies
    from bot.store.interleaved import judged_since

    c = ctx_of(ctx)
    with c.sessions()() as session:
        found = tallies(judged_since(session, now() - timedelta(days=days)))
    rows = [
        {
            "ranker": t.ranker,
            "digests": t.digests,
            "wins": t.wins,
            "losses": t.losses,
            "ties": t.ties,
            "p_value": t.p_value,
            "verdict": t.reading,
        }
        for t in found
    ]
    if as_json:
        print_json_lines(rows)
        return
    if not rows:
        out.print(f"No interleaved digest was sent in the last {plural(days, 'day')}.", markup=False)
        return
    columns = [Column(name, whole=True) for name in ("ranker", "digests", "wins", "losses", "ties", "p")]
    columns.append(Column("verdict"))
    shown = [
        [t.ranker, str(t.digests), str(t.wins), str(t.losses), str(t.ties), f"{t.p_value:.2g}", t.reading]
        for t in found
    ]
    out.print(fitted(columns, shown, width=out.width, title=f"Rankers, last {plural(days, 'day')}"))
